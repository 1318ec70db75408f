"""Vertical elasticity on Spark: a map whose function runs in a process pool of each subtask's
own is resized live, then a worker is SIGKILLed. The committed output is every record once, the
resize spread the function over more processes, the attempt after the kill runs the resized
pool again (the job master sends the sizes anew), and no pool process outlives the job."""

from __future__ import annotations

import os
import random
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import patch_jobs
import pool_functions
from epochal import CheckpointConfig, RestartStrategy, StreamEnvironment
from epochal.connectors import FileSink
from epochal.errors import JobCancelledError
from epochal.runtime.commands import Resize
from epochal.runtime.master.control import JobControl
from spark_jobs import EndlessSource, complete_checkpoints, wait_until

pytestmark = [pytest.mark.spark, pytest.mark.fault]

RECORDS = 40_000  # 20 s of the paced source: pool processes start slowly on a loaded machine


@pytest.fixture(scope="module", autouse=True)
def _ship_jobs(spark: Any) -> Iterator[None]:
    from pyspark import cloudpickle

    cloudpickle.register_pickle_by_value(patch_jobs)  # type: ignore[no-untyped-call]
    cloudpickle.register_pickle_by_value(pool_functions)  # type: ignore[no-untyped-call]
    yield


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.mark.parametrize("trial", [0, 1])
def test_a_resized_pool_then_a_sigkill_commits_every_record_once(spark: Any, tmp_path: Path, trial: int) -> None:
    from epochal.cluster.spark import SparkExecutor

    out, ckpt = str(tmp_path / "out"), str(tmp_path / "ckpt")
    env = StreamEnvironment(parallelism=2, spark=spark, checkpoint=CheckpointConfig(interval=0.2, directory=ckpt),
                            restart=RestartStrategy(max_restarts=3))
    env.from_source(EndlessSource(stop_at=RECORDS)).rebalance().map(
        pool_functions.by_pid, name="work", processes=1).sink_to(FileSink(out))
    control = JobControl("pooled", 2)
    executor = SparkExecutor(spark)
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["result"] = executor.execute(env.job_graph("pooled"), control=control)
        except BaseException as exc:  # noqa: BLE001 - the cancel ends it
            outcome["error"] = exc

    thread = threading.Thread(target=run)
    thread.start()
    rng = random.Random(trial)
    try:
        wait_until(lambda: len(executor.worker_pids) == 2 and bool(complete_checkpoints(ckpt)), "a checkpoint")
        assert control.submit(Resize("work", 3)).wait(60) == 3
        resized_at = control.status().last_checkpoint or 0
        wait_until(lambda: len({p for c, _, p in patch_jobs.committed_by_checkpoint(out) if c > resized_at}) > 2,
                   "the pools grew", 240)
        time.sleep(rng.uniform(0.0, 0.5))
        os.kill(rng.choice(sorted(executor.worker_pids.values())), signal.SIGKILL)
        killed_at = control.status().last_checkpoint or 0
        wait_until(lambda: len(patch_jobs.committed_by_checkpoint(out)) >= RECORDS, "every record committed", 300)
    finally:
        control.request_cancel()
        thread.join(timeout=300)
    assert isinstance(outcome.get("error"), JobCancelledError), outcome
    assert control.status().restarts == 1, "the kill must cost one restart"
    committed = patch_jobs.committed_by_checkpoint(out)
    assert sorted(x for _, x, _ in committed) == list(range(RECORDS)), "every record once"
    late = {pid for c, _, pid in committed if c > killed_at + 1}
    assert len(late) > 2, "after the restart the subtasks run three processes each again"
    seen = {pid for _, _, pid in committed}
    wait_until(lambda: not any(_alive(pid) for pid in seen), "every pool process ended", 30)
