"""Fault tests on local Spark: real worker processes and drivers killed with SIGKILL.

Each asserts the exact committed output: every `(word, n)` update once, nothing lost, nothing
duplicated, whatever the moment of the kill. The moment is drawn at random (a delay after a
condition was met); what the tests wait on is always a condition with a deadline.
"""

from __future__ import annotations

import os
import random
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from epochal.cluster.spark import SparkExecutor
from epochal.connectors import read_committed
from epochal.runtime.result import JobResult
from spark_jobs import (
    JOB_FILE,
    complete_checkpoints,
    epochal_cli,
    expected_updates,
    run_and_kill,
    wait_until,
    wordcount_env,
    write_corpus,
)

pytestmark = [pytest.mark.spark, pytest.mark.fault]

TRIALS = 10


def _run_and_kill(
    spark: Any, corpus: str, out: str, ckpt: str, rng: random.Random, after_checkpoint: bool
) -> tuple[JobResult, SparkExecutor]:
    env = wordcount_env(corpus, out, ckpt, spark=spark)
    # after a checkpoint: there is state to restore; else any moment, start-up included
    delay = (0.0, 2.0) if after_checkpoint else (0.3, 4.0)
    return run_and_kill(spark, env, "wordcount", ckpt, rng, after_checkpoint=after_checkpoint, delay=delay)


def test_sigkill_of_a_worker_at_a_random_moment_loses_and_duplicates_nothing(spark: Any, tmp_path: Path) -> None:
    corpus = str(tmp_path / "corpus")
    write_corpus(corpus)
    expected = expected_updates(corpus)
    restored_from_checkpoint = 0
    for trial in range(TRIALS):
        rng = random.Random(trial)
        out, ckpt = str(tmp_path / f"out{trial}"), str(tmp_path / f"ckpt{trial}")
        result, executor = _run_and_kill(spark, corpus, out, ckpt, rng, after_checkpoint=trial % 2 == 1)
        assert sorted(map(tuple, read_committed(out))) == expected, f"trial {trial}"
        assert result.restarts == 1, f"trial {trial}: the kill must have caused exactly one relaunch"
        assert executor.recovery_seconds, f"trial {trial}: recovery was not measured"
        restored_from_checkpoint += result.restored_from[-1] is not None
    # Half the kills land after a checkpoint completed: restores from state are exercised.
    assert restored_from_checkpoint >= TRIALS // 2


def test_killing_the_whole_run_then_resuming_from_latest_gives_identical_output(tmp_path: Path) -> None:
    corpus, out, ckpt = str(tmp_path / "corpus"), str(tmp_path / "out"), str(tmp_path / "ckpt")
    write_corpus(corpus)
    expected = expected_updates(corpus)
    env = {**os.environ, "EPOCHAL_TEST_CORPUS": corpus, "EPOCHAL_TEST_OUT": out, "EPOCHAL_TEST_CKPT": ckpt}
    first = epochal_cli(["run", JOB_FILE, "--checkpoint-dir", ckpt], env)
    wait_until(lambda: bool(complete_checkpoints(ckpt)) or first.poll() is not None, "a checkpoint completed", 180)
    assert first.poll() is None, "the job ended before its first checkpoint"
    time.sleep(random.Random(1).uniform(0.2, 1.5))  # the moment of the kill
    os.killpg(first.pid, signal.SIGKILL)  # the driver, its JVM and every Python worker
    assert first.wait() == -signal.SIGKILL, "the run had ended before the kill"
    # Checkpoints committed part of the output. A resumed run that started over instead of
    # restoring would commit those updates a second time.
    committed_before = len(read_committed(out))
    assert 0 < committed_before < len(expected)
    second = epochal_cli(["run", JOB_FILE, "--checkpoint-dir", ckpt, "--from-checkpoint", "latest"], env)
    _, err = second.communicate(timeout=300)
    assert second.returncode == 0, err.decode()[-3000:]
    assert sorted(map(tuple, read_committed(out))) == expected
