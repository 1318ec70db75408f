"""A Delta table followed on Spark (`DeltaSource(follow=True)` -> `DeltaSink`): versions committed
before, during and after a worker is SIGKILLed are each read once, and the output table holds
every row exactly once (the job master's enumerator hands out each version's files; the
restored attempt is sent the split log again and resumes each file at its row)."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from epochal import CheckpointConfig, JobCancelledError, RestartStrategy, StreamEnvironment
from epochal.cluster.spark import SparkExecutor
from epochal.connectors import DeltaSink, DeltaSource
from epochal.runtime.master.control import JobControl
from spark_jobs import run_in_background, wait_until

pytestmark = [pytest.mark.spark, pytest.mark.fault]
deltalake = pytest.importorskip("deltalake")


def _append(path: str, start: int, n: int) -> None:
    ids = list(range(start, start + n))
    deltalake.write_deltalake(path, pa.table({"id": ids, "region": [f"r{i % 3}" for i in ids]}),
                              partition_by=["region"], mode="append")


def _out(path: str) -> list[int]:
    if not deltalake.DeltaTable.is_deltatable(path):
        return []
    return sorted(deltalake.DeltaTable(path).to_pyarrow_table().column("id").to_pylist())


def test_versions_committed_around_a_sigkill_are_read_exactly_once(spark: Any, tmp_path: Path) -> None:
    src, dst = str(tmp_path / "in"), str(tmp_path / "out")
    _append(src, 0, 500)

    def _slow(row: tuple[Any, ...]) -> tuple[int, str]:  # a closure: Spark's workers get it by value
        import time

        time.sleep(0.001)
        return (row[0], row[1])

    env = StreamEnvironment(
        parallelism=2, executor="spark", spark=spark,
        checkpoint=CheckpointConfig(interval=0.3, directory=str(tmp_path / "ckpt")),
        restart=RestartStrategy(max_restarts=3), batch_size=32,
    )
    schema = pa.schema([("id", pa.int64()), ("region", pa.string())])
    (env.from_source(DeltaSource(src, follow=True, poll_interval=0.1)).map(_slow)
        .sink_to(DeltaSink(dst, schema=schema)))
    job = env.job_graph("delta-follow-kill")
    executor, control = SparkExecutor(spark), JobControl(job.name, 2)
    thread, outcome = run_in_background(executor, job, control)
    try:
        wait_until(lambda: len(executor.worker_pids) == 2, "both workers said hello")
        _append(src, 500, 400)
        wait_until(lambda: (control.status().last_checkpoint or 0) >= 2, "two checkpoints completed")
        _append(src, 900, 400)
        os.kill(sorted(executor.worker_pids.values())[1], signal.SIGKILL)
        _append(src, 1300, 400)  # while the stage is relaunched
        wait_until(lambda: control.status().restarts == 1, "the job restarted")
        _append(src, 1700, 300)
        wait_until(lambda: len(_out(dst)) >= 2000 or not thread.is_alive(), "every version is in the output", 240)
    finally:
        control.request_cancel()
        thread.join(timeout=120)
    assert not thread.is_alive()
    assert isinstance(outcome.get("error"), JobCancelledError), outcome
    assert _out(dst) == list(range(2000))
