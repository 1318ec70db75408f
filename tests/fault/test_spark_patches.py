"""A live logic patch on Spark, with a worker SIGKILLed after it: the committed output is the old
function's up to the patch's checkpoint and the new one's after it, every record once, and the
attempt after the kill runs the new function (the restored checkpoint records it)."""

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
from epochal.errors import JobCancelledError
from epochal.runtime.commands import Patch
from epochal.runtime.master.control import JobControl
from spark_jobs import complete_checkpoints, wait_until

pytestmark = [pytest.mark.spark, pytest.mark.fault]

RECORDS = 6_000  # 3 s of the paced source


@pytest.fixture(scope="module", autouse=True)
def _ship_jobs(spark: Any) -> Iterator[None]:
    from pyspark import cloudpickle

    cloudpickle.register_pickle_by_value(patch_jobs)  # type: ignore[no-untyped-call]
    yield


def test_a_patch_mid_stream_then_a_sigkill_commits_old_then_new_every_record_once(spark: Any, tmp_path: Path) -> None:
    from epochal.cluster.spark import SparkExecutor

    out, ckpt = str(tmp_path / "out"), str(tmp_path / "ckpt")
    env = patch_jobs.tagged_env(out, ckpt, RECORDS, spark=spark)
    control = JobControl("patched", 2)
    executor = SparkExecutor(spark)
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["result"] = executor.execute(env.job_graph("patched"), control=control)
        except BaseException as exc:  # noqa: BLE001 - the cancel ends it
            outcome["error"] = exc

    thread = threading.Thread(target=run)
    thread.start()
    try:
        wait_until(lambda: len(executor.worker_pids) == 2 and bool(complete_checkpoints(ckpt)), "a checkpoint")
        at = control.submit(Patch("tag", patch_jobs.tag_new)).wait(120)
        wait_until(lambda: control.status().last_checkpoint is not None and control.status().last_checkpoint > at,
                   "a checkpoint after the patch's")
        time.sleep(random.Random(1).uniform(0.0, 0.5))
        os.kill(random.Random(2).choice(sorted(executor.worker_pids.values())), signal.SIGKILL)
        wait_until(lambda: len(patch_jobs.committed_by_checkpoint(out)) >= RECORDS, "every record committed", 240)
    finally:
        control.request_cancel()
        thread.join(timeout=300)
    assert isinstance(outcome.get("error"), JobCancelledError), outcome
    assert control.status().restarts == 1, "the kill must cost one restart"
    committed = patch_jobs.committed_by_checkpoint(out)
    assert sorted(x for _, x, _ in committed) == list(range(RECORDS)), "every record once"
    assert {tag for c, _, tag in committed if c <= at} == {"old"}
    assert {tag for c, _, tag in committed if c > at} == {"new"}
