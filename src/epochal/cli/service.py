"""`epochal serve`: one long-lived SparkSession that runs job files, so a job starts warm.

A cold `epochal run` on Spark spends most of its time before the job's first record: the
interpreter and its imports, the driver's JVM and SparkSession, the stage's Python workers
(benchmarks/startup_recovery.py measures each). A service pays those once: it starts the
session and keeps it, and each job file sent to it (`epochal run JOB.py --service URL`, see
`cli.submit`) runs in its process on that session, as `epochal run` would run it (the same
overrides, summary and exit status), with Python, Epochal and the job's imports already loaded
and Spark's Python workers reused.

- Jobs run one at a time, in the order they came (a barrier stage needs all its slots at once:
  two jobs side by side could starve each other); a job waiting says so to its client.
- A job file runs with the client's working directory and arguments; its stdout, stderr and
  progress stream back to the client as JSON lines (`{"out": ...}`, `{"err": ...}`,
  `{"progress": {...}}`, last `{"exit": N}`), and the client prints them as `epochal run` does.
  Modules the job file imported from its own directory are forgotten when it ends, so a changed
  helper is read again by the next job.
- Running a job file runs its code as this process's user: `POST /jobs` needs the token the
  service prints at start (`Authorization: Bearer ...`), and the service listens on 127.0.0.1
  unless told otherwise. `GET /status` is open.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hmac
import io
import json
import os
import sys
import threading
import time
import traceback
import urllib.parse
from collections.abc import Iterator
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from ..api.overrides import RunOverrides
from ..cluster.endpoint import fresh_token
from ..errors import EpochalError
from ..runtime.result import JobProgress, JobResult
from .interrupt import wait_for_interrupt
from .run import exit_status, run_job_file, summaries

_OPTIONS = ("parallelism", "checkpoint_dir", "from_checkpoint", "executor", "allow_non_restored_state", "web_port")


class JobService:
    """Runs job files sent over HTTP on `spark`, one at a time, until `close()`.

    Args:
        spark: the SparkSession every job runs on (unless a job file names its own).
        host: the interface to bind; 127.0.0.1 keeps it on this machine.
        port: 0 picks a free port.
        token: the secret a client sends to run a job; a fresh random one when None.
    """

    def __init__(self, spark: Any, host: str = "127.0.0.1", port: int = 0, token: str | None = None) -> None:
        self.spark = spark
        self.token = token if token is not None else fresh_token()
        self.started_at = time.time()
        self.jobs_run = 0
        self.running: str | None = None  # the job file running now
        self._turn = threading.Lock()  # one job at a time
        self._server = ThreadingHTTPServer((host, port), _handler(self))
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.05,), name="epochal-service",
                                        daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def authorized(self, header: str | None) -> bool:
        scheme, _, given = (header or "").partition(" ")
        return scheme == "Bearer" and hmac.compare_digest(given.strip().encode(), self.token.encode())

    def status(self) -> dict[str, Any]:
        from ..cluster.session import master_of

        return {"service": "epochal", "master": master_of(self.spark), "uptime_s": time.time() - self.started_at,
                "jobs_run": self.jobs_run, "running": self.running}

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def run(self, request: dict[str, Any], send: _Lines) -> int:
        """Run one job file as `request` asks, its output going to `send`; its exit status."""
        job = str(request["file"])
        if not os.path.isfile(job):
            send.err(f"epochal: no such job file on the service's machine: {job!r}")
            return 1
        if not self._turn.acquire(blocking=False):
            send.err(f"epochal: waiting for the job running on the service to end ({self.running})")
            self._turn.acquire()
        try:
            self.running = job
            return self._run(job, [str(a) for a in request.get("args", [])], str(request.get("cwd") or "."),
                             dict(request.get("options") or {}), send)
        finally:
            self.running = None
            self.jobs_run += 1
            self._turn.release()

    def _run(self, job: str, args: list[str], cwd: str, options: dict[str, Any], send: _Lines) -> int:
        results: list[JobResult] = []
        unknown = set(options) - set(_OPTIONS)
        if unknown:
            send.err(f"epochal: the service takes no option {sorted(unknown)} (it runs on its own session)")
            return 1
        overrides = RunOverrides(
            parallelism=options.get("parallelism"), checkpoint_directory=options.get("checkpoint_dir"),
            from_checkpoint=options.get("from_checkpoint"), executor=options.get("executor"),
            allow_non_restored_state=bool(options.get("allow_non_restored_state")), web_port=options.get("web_port"),
            progress=send.progress, on_result=results.append, spark=self.spark,
        )
        try:
            with _job_process_state(job, cwd), contextlib.redirect_stdout(send.stdout), \
                    contextlib.redirect_stderr(send.stderr):
                run_job_file(job, args, overrides)
            code = exit_status(results)
        except EpochalError as exc:
            send.err(f"epochal: {exc}")
            code = 1
        except SystemExit as exc:  # the job file's own sys.exit
            if exc.code is not None and not isinstance(exc.code, int):
                send.err(str(exc.code))
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        except BaseException:  # noqa: BLE001 - the job file's error: its traceback is its author's
            send.err(traceback.format_exc().rstrip())
            code = 1
        for line in summaries(results):
            send.err(line)
        return code


@contextlib.contextmanager
def _job_process_state(job: str, cwd: str) -> Iterator[None]:
    """The job file runs in the client's directory with its own directory on the import path;
    afterwards the process is as it was, and the modules imported from the job's directory are
    forgotten (the next job reads them again)."""
    before_cwd, before_path = os.getcwd(), list(sys.path)
    home = os.path.dirname(os.path.abspath(job))
    before_modules = set(sys.modules)
    os.chdir(cwd)
    sys.path.insert(0, home)
    try:
        yield
    finally:
        os.chdir(before_cwd)
        sys.path[:] = before_path
        for name in set(sys.modules) - before_modules:
            module_file = getattr(sys.modules.get(name), "__file__", None) or ""
            if os.path.abspath(module_file).startswith(home + os.sep):
                del sys.modules[name]


class _Lines:
    """The response of one `POST /jobs`: JSON lines, written as they come (the connection closes
    at the end: HTTP/1.0)."""

    def __init__(self, out: io.BufferedIOBase) -> None:
        self._out = out
        self._lock = threading.Lock()
        self.stdout = _TextTo(self, "out")
        self.stderr = _TextTo(self, "err")
        self.gone = False  # the client went away: the job runs on, its output is dropped

    def send(self, message: dict[str, Any]) -> None:
        data = (json.dumps(message, default=str) + "\n").encode()
        with self._lock:
            if self.gone:
                return
            try:
                self._out.write(data)
                self._out.flush()
            except OSError:
                self.gone = True

    def err(self, line: str) -> None:
        self.send({"err": line + "\n"})

    def progress(self, p: JobProgress) -> None:
        self.send({"progress": dataclasses.asdict(p)})


class _TextTo(io.TextIOBase):
    """A text stream (the job's `sys.stdout` or `sys.stderr`) that sends what is written."""

    def __init__(self, lines: _Lines, kind: str) -> None:
        self._lines = lines
        self._kind = kind

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        if text:
            self._lines.send({self._kind: text})
        return len(text)

    def isatty(self) -> bool:
        return False


def _handler(service: JobService) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        server_version = "epochal-service"

        def do_GET(self) -> None:  # noqa: N802 - the standard library's name
            if urllib.parse.urlsplit(self.path).path.rstrip("/") == "/status":
                self._reply(HTTPStatus.OK, service.status())
            else:
                self._reply(HTTPStatus.NOT_FOUND, {"error": f"no such page: {self.path}"})

        def do_POST(self) -> None:  # noqa: N802
            if urllib.parse.urlsplit(self.path).path.rstrip("/") != "/jobs":
                self._reply(HTTPStatus.NOT_FOUND, {"error": f"no such action: {self.path}"})
                return
            if not service.authorized(self.headers.get("Authorization")):
                self._reply(HTTPStatus.UNAUTHORIZED, {"error": "running a job needs the service's token"})
                return
            try:
                request = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
                assert isinstance(request, dict) and "file" in request
            except (ValueError, AssertionError):
                self._reply(HTTPStatus.BAD_REQUEST, {"error": 'send {"file": PATH, "args": [...], "cwd": DIR}'})
                return
            self.send_response(HTTPStatus.OK)
            self.send_header("Content-Type", "application/x-ndjson")
            self.end_headers()
            lines = _Lines(self.wfile)
            lines.send({"exit": service.run(request, lines)})

        def _reply(self, status: HTTPStatus, body: dict[str, Any]) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the standard library's name
            pass

    return Handler


def serve(args: Any) -> int:
    """`epochal serve`: start the session, warm its Python workers, serve until SIGTERM or Ctrl-C."""
    import logging

    from ..cluster.session import SPARK_LOG_ENV, create_session, probe_master, stop_session

    if args.verbose:
        os.environ.setdefault(SPARK_LOG_ENV, "WARN")
        logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s")
        logging.getLogger("epochal").setLevel(logging.INFO)
    master = args.master or "local[*]"
    probe_master(master)
    spark = create_session(master)
    warm_workers(spark)
    service = JobService(spark, args.host, args.port, args.token)
    try:
        wait_for_interrupt(lambda: print(
            f"epochal: serving job files at {service.url} on Spark {master} (token for jobs: {service.token}); "
            f"run one with: epochal run JOB.py --service {service.url}", file=sys.stderr, flush=True))
    finally:
        service.close()
        stop_session()
    return 0


def warm_workers(spark: Any) -> None:
    """Start Spark's Python workers, one per slot, and have each import Epochal's worker
    modules (PySpark reuses its Python workers between tasks): the first job then starts as
    warm as the next. Classic sessions only (a Connect server warms its own)."""
    if not hasattr(spark, "sparkContext"):
        return
    context = spark.sparkContext
    slots = context.defaultParallelism
    context.setJobGroup("epochal-warm-up", "epochal serve: warm the Python workers")
    context.parallelize(range(slots), slots).map(_import_worker_modules).collect()


def _import_worker_modules(_: int) -> int:
    import epochal.cluster.stage_task  # noqa: F401 - imported for its side effect: loaded once

    return os.getpid()
