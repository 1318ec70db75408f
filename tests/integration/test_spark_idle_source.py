"""An idle job's Spark workers stay near 0 % CPU: a quiet source is polled at its reader's pace,
and a worker with nothing to do sleeps in its sockets until a timer or a message is due."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest

from epochal import JobCancelledError, StreamEnvironment
from epochal.cluster.spark import SparkExecutor
from epochal.connectors import FileSink
from epochal.runtime.master.control import JobControl
from spark_jobs import QuietSource, cpu_seconds, wait_until

pytestmark = pytest.mark.spark


def test_the_workers_of_an_idle_job_use_almost_no_cpu(spark: Any, tmp_path: Path) -> None:
    env = StreamEnvironment(parallelism=2, executor="spark", spark=spark)
    env.from_source(QuietSource(records=1_000, wait=0.2)).key_by(lambda x: x % 7).count().sink_to(
        FileSink(str(tmp_path / "out"))
    )
    job = env.job_graph("idle-on-spark")
    executor, control = SparkExecutor(spark), JobControl(job.name, 2)

    def run() -> None:
        try:
            executor.execute(job, None, control)
        except JobCancelledError:
            pass

    thread = threading.Thread(target=run)
    thread.start()
    try:
        wait_until(lambda: len(executor.worker_pids) == 2, "both workers said hello")
        time.sleep(2.0)  # the 1,000 records are long done: the job is idle
        pids = sorted(executor.worker_pids.values())
        before, started = [cpu_seconds(p) for p in pids], time.monotonic()
        time.sleep(3.0)
        elapsed = time.monotonic() - started
        shares = [(cpu_seconds(p) - b) / elapsed for p, b in zip(pids, before, strict=True)]
        assert max(shares) < 0.05, f"idle workers used {shares} of a core"
    finally:
        control.request_cancel()
        thread.join(timeout=120)
    assert not thread.is_alive()
