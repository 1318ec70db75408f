"""What each task of a job's barrier stage runs, and what the driver reads back from its failure.

A task (`worker_function`) listens on a port of its own and supervises its Epochal worker's
processes (`cluster.supervisor`) until the job ends; the worker learns every peer's address
from the job master, which collects them from the workers' `Hello`s (`cluster.protocol.Peers`):
the barrier context's `allGather` did the same in about a second, as the JVM polls once a
second; barrier mode still gang-schedules the tasks. When a task fails, Spark hands the driver its error
wrapped in Py4J's or Connect's text: `describe_failure` and `unreachable_in` read the Python
error back out of it. Apart from the stage host (`cluster.stage_host`), which submits (`cluster.barrier_stage`) and
supervises stages.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from typing import Any

from ..plan.job_graph import JobGraph
from ..runtime.gc_tuning import tuned_gc
from .link_guard import UNREACHABLE, LinkGuard
from .snapshot_thread import snapshot_friendly_gil
from .supervisor import supervise
from .worker import Worker


def worker_function(job: JobGraph, workers: int, launch: int, driver: tuple[str, int], secret: bytes) -> Any:
    """The function every task of launch `launch` runs: listen, and supervise the worker's
    processes until the job ends (the worker learns its peers' addresses from the job master).

    `secret` is the job's (`runtime.wire.handshake`): this closure is its only way to the
    workers, as Spark carries task closures to executors over its own (authenticated, with
    `spark.authenticate`, and encrypted, with `spark.network.crypto.enabled`) RPC."""
    guard = LinkGuard(secret, job.config.network)

    def run(rows: Iterator[Any]) -> Iterator[Any]:
        import pyarrow as pa
        from pyspark import BarrierTaskContext

        started = time.time()
        for _ in rows:  # the stage's input: one row per worker, nothing to read
            pass
        ctx = BarrierTaskContext.get()
        index = ctx.partitionId()
        host = ctx.getTaskInfos()[index].address.rsplit(":", 1)[0]
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            listener.bind((host, 0))
        except OSError:
            listener.bind(("0.0.0.0", 0))
        listener.listen(workers)
        address = (host, listener.getsockname()[1])

        def incarnation(number: int) -> None:
            with tuned_gc(job.config.gc_threshold, freeze=True), snapshot_friendly_gil():
                worker = Worker(job, index, workers, launch, driver, listener, address, number, started, guard)
                worker.connect()
                worker.run()

        try:
            supervise(incarnation, max_replacements=job.config.restart.max_restarts + 1)
        finally:
            listener.close()
        yield pa.RecordBatch.from_pydict({"worker": [index]}, schema=pa.schema([("worker", pa.int32())]))

    return run


def unreachable_in(errors: list[BaseException]) -> str | None:
    """A worker's `JobMasterUnreachable` message in a (Py4J- or Connect-wrapped) Spark failure."""
    for error in errors:
        for line in str(error).splitlines():
            if UNREACHABLE in line:
                return line[line.index(UNREACHABLE) :].strip()
    return None


def raised_in_task(errors: list[BaseException]) -> bool:
    """Whether a (Py4J-wrapped) Spark failure carries a Python error a task raised (its traceback),
    rather than a process that died or an executor that was lost."""
    return bool(errors) and "Traceback (most recent call last):" in str(errors[0])


def describe_failure(errors: list[BaseException]) -> str:
    """What went wrong in a (Py4J-wrapped) Spark failure: the Python error when there is one."""
    if not errors:
        return "no error"
    lines = str(errors[0]).splitlines()
    # the traceback begins a line of its own, or ends Spark's "... from the Python worker: " line
    start = next((i for i, line in enumerate(lines) if line.endswith("Traceback (most recent call last):")), None)
    if start is not None:
        for line in lines[start + 1 :]:
            if line and not line[0].isspace():
                return line.strip()[:500]
    for line in lines:
        if ("Exception" in line or "Error" in line) and "collectAndServe" not in line:
            return line.strip()[:500]
    return lines[0][:500] if lines else type(errors[0]).__name__
