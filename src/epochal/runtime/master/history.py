"""A job's history, kept in its checkpoint directory: what the dashboard showed, after the job ended.

The control endpoint, the dashboard and `/metrics` live as long as the job. Flink keeps a
finished job's REST answers in an archive its history server serves; here the job master keeps
one JSON file per run in `<checkpoint directory>/history/`: the run's status (state, attempts,
restarts), its metrics snapshot (operators and their counts, the last 100 checkpoints with
durations and sizes, the restarts and their causes, the throughput series) and its summary line.
The file is rewritten, atomically, when an attempt fails, when the job ends (finished, failed or
cancelled), and at most every `EVERY_S` seconds as checkpoints complete, so a driver killed
mid-run leaves its history up to then. `epochal history DIR` reads it, and serves the
dashboard on it (`cluster.history_endpoint`).

Written with the checkpoint storage's atomic writes, so on any store checkpoints go to; never
touched by retention or by `existing="overwrite"` (which delete `chk-*` directories only).
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import logging
import posixpath
import time
import uuid
import weakref
from dataclasses import dataclass
from typing import Any

import pyarrow.fs as pafs

from ...errors import CheckpointError, NoCheckpointError
from ...state.storage import CheckpointStorage
from ..wire.messages import OperatorMetrics
from .control import JobControl

log = logging.getLogger(__name__)

HISTORY_DIR = "history"
FORMAT = 1
EVERY_S = 10.0  # at most one rewrite per this many seconds while checkpoints complete

# the history of a run goes on across job masters of the same run (a rescale relaunches one)
_runs: weakref.WeakKeyDictionary[JobControl, JobHistory] = weakref.WeakKeyDictionary()


class JobHistory:
    """The history file of one run of a job (`history/<run>.json` under the checkpoint root)."""

    def __init__(self, storage: CheckpointStorage, job: str) -> None:
        self.storage = storage
        self.started_at = time.time()
        stamp = datetime.datetime.fromtimestamp(self.started_at, datetime.UTC).strftime("%Y%m%d-%H%M%S")
        self.run = f"{stamp}-{uuid.uuid4().hex[:6]}"
        self.path = posixpath.join(HISTORY_DIR, f"{self.run}.json")
        self.job = job
        self._written = float("-inf")

    @staticmethod
    def of(control: JobControl, storage: CheckpointStorage | None) -> JobHistory | None:
        """The history of the run `control` belongs to (made on first use); None without storage."""
        if storage is None:
            return None
        history = _runs.get(control)
        if history is None or history.storage.uri != storage.uri:
            history = _runs[control] = JobHistory(storage, control.status().job)
        return history

    def record(self, control: JobControl, summary: str | None = None, *, often: bool = False,
               operators: tuple[OperatorMetrics, ...] = ()) -> None:
        """Write what `control` holds now (its status and newest metrics), and, at the end, the
        summary and the whole job's counts per operator; `often`: only if the last write is
        `EVERY_S` old (a checkpoint completed). A failed write is logged: the history never
        fails a job."""
        now = time.monotonic()
        if often and now - self._written < EVERY_S:
            return
        self._written = now
        status = control.status()
        metrics = control.metrics()
        ended = status.state.is_final
        body = {
            "format": FORMAT,
            "run": self.run,
            "job": status.job,
            "started_at": self.started_at,
            "ended_at": time.time() if ended else None,
            "written_at": time.time(),
            "summary": summary,
            "operators": [dataclasses.asdict(m) for m in operators],  # the whole job's, at its end
            "status": status.to_json(),
            "metrics": metrics.to_json() if metrics is not None else None,
        }
        try:
            self.storage.write(self.path, json.dumps(body, separators=(",", ":")).encode())
        except CheckpointError as exc:
            log.warning("job %r: history not written: %s", status.job, exc)


@dataclass(frozen=True, slots=True)
class RunRecord:
    """One run read back from a history directory."""

    run: str
    job: str
    state: str
    started_at: float
    ended_at: float | None
    written_at: float
    summary: str | None
    status: dict[str, Any]
    metrics: dict[str, Any] | None
    operators: tuple[dict[str, Any], ...] = ()  # the whole job's counts, once it ended

    @property
    def seconds(self) -> float | None:
        return None if self.ended_at is None else self.ended_at - self.started_at


def read_history(directory: str) -> list[RunRecord]:
    """Every run recorded under checkpoint directory `directory`, oldest first.

    Raises:
        NoCheckpointError: `directory` is no checkpoint directory (`CheckpointStorage(create=False)`).
    """
    storage = CheckpointStorage(directory, create=False)
    root = posixpath.join(storage.root, HISTORY_DIR)
    try:
        infos = storage.fs.get_file_info(pafs.FileSelector(root, allow_not_found=True))
    except OSError as exc:
        raise NoCheckpointError(f"cannot list {directory!r}: {exc}") from exc
    runs = []
    for info in sorted(infos, key=lambda i: i.base_name):
        if info.type != pafs.FileType.File or not info.base_name.endswith(".json"):
            continue
        try:
            with storage.fs.open_input_stream(info.path) as f:
                body = json.loads(f.read())
            runs.append(RunRecord(body["run"], body["job"], body["status"]["state"], body["started_at"],
                                  body.get("ended_at"), body.get("written_at", body["started_at"]),
                                  body.get("summary"), body["status"], body.get("metrics"),
                                  tuple(body.get("operators") or ())))
        except (OSError, ValueError, KeyError) as exc:
            log.warning("history file %s unreadable: %s", info.path, exc)
    return sorted(runs, key=lambda r: r.started_at)  # two runs may start within a second
