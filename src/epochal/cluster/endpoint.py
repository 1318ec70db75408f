"""The job's control endpoint: HTTP on the job master's host, for the CLI, scripts and browsers.

One small server per job, started by the host next to its job master (on the driver for Spark),
serving the job's `JobControl`. Reading is open: `GET /status`, `GET /metrics` (the Prometheus
text format), `GET /metrics.json` (the same snapshot as JSON), `GET /state/<uid>/<key>` (a key's
committed state, or with `?live=1` its live value from the subtask that owns it) and the
dashboard (`GET /`, a static page in `cluster/dashboard/` that polls the two JSON views). Acting (`POST /cancel`,
`/rescale`, `/savepoint`, `/move`, `/patch` and `/resize`: `cluster.patch_request`, `resize_request`) needs
the token the job prints at start, sent as `Authorization: Bearer <token>`, because whoever can
cancel a job can lose a day of a team's work: an action without it is refused, logged with the
caller's address and counted (`epochal_links_refused_total`). `POST /cancel?wait=S` answers once
the job ended (at most S seconds), with its final status, since the endpoint closes with the job.
It binds 127.0.0.1 unless told otherwise, so nothing off the machine reaches it by accident.

Every read but a live state query serves the newest snapshot the job master published into the
`JobControl` (`runtime.metrics.JobMetrics`): a scrape never reaches the job master or its tasks. The
Prometheus exposition is `prometheus_client`'s, from a collector registered in a registry of
this endpoint's own (the process's global registry stays untouched: two jobs in one process
serve two endpoints).

The standard library's threading server is enough: a handful of requests a second, none on a
hot path.
"""

from __future__ import annotations

import json
import logging
import secrets
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from http import HTTPStatus
from typing import Any, ClassVar
from urllib.parse import SplitResult

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest

from ..errors import EpochalError, NoCheckpointError
from ..runtime.commands import Command, Move, Rescale, Savepoint
from ..runtime.master.control import JobControl, JobState
from ..runtime.metrics import CheckpointStatus, JobMetrics, OperatorStats, SubtaskCounts, TaskStats
from ..runtime.wire.handshake import Refusals
from ..state.keygroups import parse_key_groups
from . import patch_request, resize_request
from .http_handler import HttpEndpoint, JsonHandler, Route

log = logging.getLogger(__name__)


def fresh_token() -> str:
    """A random secret for actions: hex, so it never starts with '-' (else `--token T` fails to
    parse on the command line, as a URL-safe one did for 1 job in 64)."""
    return secrets.token_hex(16)


class ControlEndpoint(HttpEndpoint):
    """Serves one job's control over HTTP until `close()`.

    Args:
        control: the job's mailbox.
        host: the interface to bind; 127.0.0.1 keeps it on this machine.
        port: 0 picks a free port.
        token: the secret actions need; a fresh random one when None.
    """

    def __init__(self, control: JobControl, host: str = "127.0.0.1", port: int = 0, token: str | None = None) -> None:
        self.control = control
        self.token = token if token is not None else fresh_token()
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(JobCollector(control))
        handler = type("Handler", (_Handler,), {"endpoint": self})
        super().__init__(handler, host, port, "epochal-endpoint")
        control.web_url = self.url
        log.info("job %r: control endpoint at %s", control.status().job, self.url)


class _Handler(JsonHandler):
    """The job's pages (`/status`, `/metrics`, `/metrics.json`, `/state/...`) and actions."""

    endpoint: ClassVar[ControlEndpoint]

    def token(self) -> str | None:
        return self.endpoint.token

    def refusals(self) -> Refusals | None:
        return self.endpoint.control.refusals

    def page(self, path: str) -> Route | None:
        return _Handler._state if path.startswith("/state/") else super().page(path)

    def _status(self, url: SplitResult) -> None:
        self.reply(HTTPStatus.OK, self.endpoint.control.status().to_json())

    def _prometheus(self, url: SplitResult) -> None:
        self.send(HTTPStatus.OK, CONTENT_TYPE_LATEST, generate_latest(self.endpoint.registry))

    def _metrics(self, url: SplitResult) -> None:
        metrics = self.endpoint.control.metrics()
        self.reply(HTTPStatus.OK, metrics.to_json() if metrics is not None else {})

    def _state(self, url: SplitResult) -> None:
        """`GET /state/<uid>/<key>`: the key's committed state (the key as JSON, or a string);
        with `?live=1`, the value the owning subtask holds now."""
        control = self.endpoint.control
        operator, _, raw = url.path[len("/state/"):].partition("/")
        if not operator or not raw:
            self.reply(HTTPStatus.BAD_REQUEST, {"error": "ask /state/<operator uid>/<key>"})
            return
        operator, key = urllib.parse.unquote(operator), _parse_key(urllib.parse.unquote(raw))
        live = urllib.parse.parse_qs(url.query).get("live", ["0"])[0].lower() in ("1", "true", "yes")
        checkpoint: int | None = None
        try:
            if live:
                values = control.query_live(operator, key)
            else:
                checkpoint, values = control.query_state(operator, key)
        except NoCheckpointError as exc:
            self.reply(HTTPStatus.NOT_FOUND, {"error": str(exc)})
            return
        except EpochalError as exc:
            self.reply(HTTPStatus.CONFLICT, {"error": str(exc)})
            return
        except TimeoutError as exc:
            self.reply(HTTPStatus.GATEWAY_TIMEOUT, {"error": str(exc)})
            return
        body = {"operator": operator, "key": key, "live": live, "checkpoint": checkpoint, "state": values}
        self.send(HTTPStatus.OK, "application/json", json.dumps(body, default=repr).encode())

    def _cancel(self, url: SplitResult) -> None:
        control = self.endpoint.control
        accepted = control.request_cancel()
        status = control.status()
        if accepted and (wait := _wait(url.query)):
            # the endpoint closes with the job: the answer is the last word a page gets
            status = control.wait_final(wait)
        self.reply(HTTPStatus.ACCEPTED if accepted else HTTPStatus.CONFLICT,
                   {"cancel": accepted, "status": status.to_json()})

    def _patch(self, url: SplitResult) -> None:
        """The body: the new function, pickled (`cluster.patch_request`)."""
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        uid = urllib.parse.parse_qs(url.query).get("uid", [""])[0]
        self.reply(*patch_request.answer(self.endpoint.control, uid, body))

    def _resize(self, url: SplitResult) -> None:
        """A function pool's size (`cluster.resize_request`)."""
        self.reply(*resize_request.answer(self.endpoint.control, urllib.parse.parse_qs(url.query)))

    def _command(self, url: SplitResult) -> None:
        """`POST /rescale?parallelism=N`, `POST /savepoint?target=DIR`,
        `POST /move?groups=0-3,7&to=SUBTASK[&batch=N]`: answered when done."""
        kind, query = url.path.rstrip("/").lstrip("/"), urllib.parse.parse_qs(url.query)
        name = {"rescale": "parallelism", "savepoint": "target", "move": "groups"}[kind]
        given = query.get(name, [""])[0]
        if not given:
            self.reply(HTTPStatus.BAD_REQUEST, {"error": f"{kind} needs ?{name}=..."})
            return
        command: Command[object]
        try:
            if kind == "move":
                try:
                    to, batch = int(query.get("to", [""])[0]), query.get("batch", [""])[0]
                    groups = parse_key_groups(given)
                    command = Move(tuple((g, to) for g in groups), int(batch) if batch else None)
                except ValueError as exc:
                    raise ValueError(f"move needs ?groups=0-3,7&to=SUBTASK: {exc}") from exc
            elif kind == "rescale":
                try:
                    parallelism = int(given)
                except ValueError:
                    raise ValueError(f"parallelism must be an integer, got {given!r}") from None
                command = Rescale(parallelism)
            else:
                command = Savepoint(given)
        except ValueError as exc:
            self.reply(HTTPStatus.BAD_REQUEST, {"error": str(exc)})
            return
        try:
            result = self.endpoint.control.submit(command).wait(_COMMAND_TIMEOUT)
        except TimeoutError as exc:
            self.reply(HTTPStatus.GATEWAY_TIMEOUT, {"error": str(exc)})
        except (EpochalError, ValueError) as exc:
            self.reply(HTTPStatus.CONFLICT, {"error": str(exc)})
        else:
            self.reply(HTTPStatus.OK, {kind: result, "status": self.endpoint.control.status().to_json()})

    pages = {"/status": _status, "/metrics": _prometheus, "/metrics.json": _metrics}
    actions = {"/cancel": _cancel, "/patch": _patch, "/rescale": _command, "/savepoint": _command, "/move": _command,
               "/resize": _resize}

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the standard library's name
        log.debug("endpoint: " + format, *args)


def _parse_key(text: str) -> Any:
    """A key in a URL: JSON when it parses (`42`, `"w1"`, `[1, "a"]` for a tuple), else the text."""
    try:
        key = json.loads(text)
    except ValueError:
        return text
    return tuple(key) if isinstance(key, list) else key


_COMMAND_TIMEOUT = 300.0  # seconds a rescale or savepoint request waits for its checkpoint


def _wait(query: str) -> float:
    """`?wait=S`: answer once the job ended, or after S seconds (at most 30); 0 when absent."""
    try:
        return min(30.0, max(0.0, float(urllib.parse.parse_qs(query).get("wait", ["0"])[0])))
    except ValueError:
        return 0.0


# -- Prometheus ------------------------------------------------------------------------------------
class JobCollector:
    """A `prometheus_client` collector of one job: reads the newest `JobMetrics` at scrape time.

    Names follow Prometheus's conventions: `epochal_` first, base units (seconds, bytes),
    `_total` on counters, ratios from 0 to 1; every sample has a `job` label.
    """

    def __init__(self, control: JobControl) -> None:
        self.control = control

    def describe(self) -> list[Metric]:
        return []  # nothing to check at registration: the names come with the snapshot

    def collect(self) -> Iterator[Metric]:
        status = self.control.status()
        job = status.job
        state = GaugeMetricFamily("epochal_job_state", "1 for the state the job is in", labels=["job", "state"])
        for s in JobState:
            state.add_metric([job, s.value], 1.0 if s is status.state else 0.0)
        yield state
        yield _gauge("epochal_job_parallelism", "Workers (the largest parallelism of an operator)", job,
                     status.parallelism)
        refused = CounterMetricFamily(
            "epochal_links_refused", "Connections to the job's ports refused: no handshake, a wrong proof, "
            "a broken frame, or an action without the token", labels=["job"])
        refused.add_metric([job], self.control.refusals.count)
        yield refused
        metrics = self.control.metrics()
        if metrics is not None:
            yield from _job_metrics(metrics)


def _gauge(name: str, doc: str, job: str, value: float) -> GaugeMetricFamily:
    family = GaugeMetricFamily(name, doc, labels=["job"])
    family.add_metric([job], value)
    return family


def _job_metrics(m: JobMetrics) -> Iterator[Metric]:
    job = m.job
    yield _gauge("epochal_job_attempt", "The attempt running now (1, then one more per restart or rescale)", job,
                 m.attempt)
    yield _gauge("epochal_job_uptime_seconds", "Seconds since the job started", job, m.uptime_s)
    restarts = CounterMetricFamily("epochal_restarts", "Failed attempts the job restarted from", labels=["job"])
    restarts.add_metric([job], m.restart_count)
    yield restarts
    yield from _checkpoint_metrics(m)
    per_subtask: dict[str, tuple[str, Callable[[SubtaskCounts], float]]] = {
        "epochal_records_in": ("Records into the operator", lambda s: s.records_in),
        "epochal_records_out": ("Records out of the operator", lambda s: s.records_out),
        "epochal_late_records": ("Records too late for their windows", lambda s: s.late_records),
        "epochal_skipped_records": ("Records the operator's code failed on, skipped (on_error='skip')",
                                    lambda s: s.skipped_records),
    }
    for name, (doc, value) in per_subtask.items():
        counter = CounterMetricFamily(name, doc, labels=["job", "operator", "subtask"])
        for op in m.operators:
            for sub in op.subtasks:
                counter.add_metric([job, op.name, str(sub.subtask)], value(sub))
        yield counter
    per_operator: dict[str, tuple[str, Callable[[OperatorStats], float | None]]] = {
        "epochal_records_in_per_second": ("Records into the operator a second, over the last interval",
                                          lambda o: o.in_rate),
        "epochal_records_out_per_second": ("Records out of the operator a second, over the last interval",
                                           lambda o: o.out_rate),
        "epochal_watermark_seconds": ("The operator's watermark (lowest over its subtasks), event-time seconds",
                                      lambda o: o.watermark if o.watermark_lag_s is not None else None),
        "epochal_watermark_lag_seconds": ("Wall-clock time now minus the operator's watermark",
                                          lambda o: o.watermark_lag_s),
        "epochal_state_size_bytes": ("Bytes of the operator's state in the last complete checkpoint",
                                     lambda o: o.state_bytes),
    }
    for name, (doc, read) in per_operator.items():
        gauge = GaugeMetricFamily(name, doc, labels=["job", "operator"])
        for op in m.operators:
            if (v := read(op)) is not None:
                gauge.add_metric([job, op.name], v)
        yield gauge
    yield from _task_metrics(m)


def _task_metrics(m: JobMetrics) -> Iterator[Metric]:
    job = m.job
    gauges: dict[str, tuple[str, Callable[[TaskStats], float]]] = {
        "epochal_task_busy_ratio": ("Share of the last interval the task spent working", lambda t: t.busy_ratio),
        "epochal_task_backpressured_ratio": ("Share of the last interval the task waited on a full output",
                                             lambda t: t.backpressured_ratio),
        "epochal_task_idle_ratio": ("Share of the last interval the task had nothing to do", lambda t: t.idle_ratio),
        "epochal_task_input_queue_fill_ratio": ("Fill of the task's fullest input channel, 0 to 1",
                                                lambda t: t.input_fill),
        "epochal_task_input_queued": ("Elements waiting in the task's input channels", lambda t: t.input_queued),
    }
    counters: dict[str, tuple[str, Callable[[TaskStats], float]]] = {
        "epochal_task_busy_seconds": ("Seconds the task spent working", lambda t: t.busy_s),
        "epochal_task_backpressured_seconds": ("Seconds the task waited on a full output",
                                               lambda t: t.backpressured_s),
        "epochal_task_idle_seconds": ("Seconds the task had nothing to do", lambda t: t.idle_s),
    }
    labels = ["job", "task", "subtask"]
    for name, (doc, value) in gauges.items():
        gauge = GaugeMetricFamily(name, doc, labels=labels)
        for t in m.tasks:
            gauge.add_metric([job, t.vertex, str(t.subtask)], value(t))
        yield gauge
    for name, (doc, total) in counters.items():
        counter = CounterMetricFamily(name, doc, labels=labels)
        for t in m.tasks:
            counter.add_metric([job, t.vertex, str(t.subtask)], total(t))
        yield counter


def _checkpoint_metrics(m: JobMetrics) -> Iterator[Metric]:
    job = m.job
    checkpoints = CounterMetricFamily("epochal_checkpoints", "Checkpoints that ended, by how",
                                      labels=["job", "status"])
    checkpoints.add_metric([job, CheckpointStatus.COMPLETED.value], m.checkpoints_completed)
    checkpoints.add_metric([job, CheckpointStatus.ABORTED.value], m.checkpoints_aborted)
    yield checkpoints
    last = m.last_completed
    if last is None:
        return
    yield _gauge("epochal_last_checkpoint_id", "The id of the last complete checkpoint", job, last.checkpoint_id)
    yield _gauge("epochal_last_checkpoint_timestamp_seconds", "When the last complete checkpoint was triggered",
                 job, last.triggered_at)
    yield _gauge("epochal_checkpoint_duration_seconds", "How long the last complete checkpoint took, trigger "
                 "to manifest", job, last.duration_s or 0.0)
    yield _gauge("epochal_checkpoint_alignment_seconds", "The longest barrier alignment of a task in the last "
                 "complete checkpoint", job, last.alignment_s or 0.0)
    size = GaugeMetricFamily("epochal_checkpoint_size_bytes", "Bytes of the last complete checkpoint: what a "
                             "restore reads (full) and what it wrote itself (delta)", labels=["job", "kind"])
    size.add_metric([job, "full"], last.full_bytes)
    size.add_metric([job, "delta"], last.delta_bytes)
    yield size


# -- the client side: what `epochal status` and `epochal cancel` call ----------------------------------


def call(url: str, path: str, token: str | None = None, timeout: float = 10.0,
         data: bytes = b"") -> tuple[int, dict[str, Any]]:
    """`GET url+path` (or `POST` with the token, and `data`, when given): the HTTP status and the
    JSON body.

    Raises:
        EpochalError: nothing answers at `url`, or what answers is not a job's endpoint.
    """
    request = urllib.request.Request(url.rstrip("/") + path, method="GET" if token is None else "POST",
                                     data=None if token is None else data)
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        try:
            return error.code, json.loads(error.read())
        except ValueError:
            raise EpochalError(f"{url} answered {error.code} but is not an Epochal job") from error
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        raise EpochalError(f"cannot reach a job at {url} ({reason})") from exc
