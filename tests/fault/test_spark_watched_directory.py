"""A watched directory on Spark: files arrive before, during and after a worker is SIGKILLed, and
every line is counted exactly once (the job master's enumerator hands out the files; the
restored attempt is sent the whole split log again and resumes each file at its position)."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import pytest

from epochal import CheckpointConfig, JobCancelledError, RestartStrategy, StreamEnvironment
from epochal.cluster.spark import SparkExecutor
from epochal.connectors import FileSink, TextFileSource
from epochal.runtime.master.control import JobControl
from spark_jobs import add_file, committed, expected, run_in_background, slow_split, wait_until

pytestmark = pytest.mark.spark


def test_files_arriving_around_a_sigkill_are_counted_exactly_once(spark: Any, tmp_path: Path) -> None:
    inbox, out = tmp_path / "inbox", tmp_path / "out"
    inbox.mkdir()
    add_file(inbox, "f00.txt", 400, seed=0)
    env = StreamEnvironment(
        parallelism=2,
        executor="spark",
        spark=spark,
        checkpoint=CheckpointConfig(interval=0.3, directory=str(tmp_path / "ckpt")),
        restart=RestartStrategy(max_restarts=3),
        batch_size=32,
    )
    lines = env.from_source(TextFileSource(inbox, watch=0.1, split_size=4_000))
    lines.flat_map(slow_split).key_by(lambda w: w).count().sink_to(FileSink(str(out)))
    job = env.job_graph("watched-kill")
    executor, control = SparkExecutor(spark), JobControl(job.name, 2)

    thread, outcome = run_in_background(executor, job, control)
    try:
        wait_until(lambda: len(executor.worker_pids) == 2, "both workers said hello")
        add_file(inbox, "f01.txt", 400, seed=1)
        wait_until(lambda: (control.status().last_checkpoint or 0) >= 2, "two checkpoints completed")
        add_file(inbox, "f02.txt", 400, seed=2)
        os.kill(sorted(executor.worker_pids.values())[1], signal.SIGKILL)
        add_file(inbox, "f03.txt", 400, seed=3)  # while the stage is relaunched
        wait_until(lambda: control.status().restarts == 1, "the job restarted")
        add_file(inbox, "f04.txt", 400, seed=4)
        want = len(expected(inbox))
        wait_until(lambda: len(committed(out)) >= want or not thread.is_alive(), "the inbox is committed", 240)
    finally:
        control.request_cancel()
        thread.join(timeout=120)
    assert not thread.is_alive()
    assert isinstance(outcome.get("error"), JobCancelledError), outcome
    assert committed(out) == expected(inbox)
