"""Fault tests on local Spark: real worker processes and drivers killed with SIGKILL.

Each asserts the exact committed output: every `(word, n)` update once, nothing lost, nothing
duplicated, whatever the moment of the kill. The moment is drawn at random (a delay after a
condition was met); what the tests wait on is always a condition with a deadline. The worker
kills run on a classic session and through Spark Connect (fewer trials: the same code path,
launched the same way); the whole-run kill also kills a Connect client, the job master with it,
while the server and its executors live on.
"""

from __future__ import annotations

import glob
import os
import random
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from epochal.cluster.session import is_connect
from epochal.cluster.spark import SparkExecutor
from epochal.connectors import read_committed
from epochal.runtime.result import JobResult
from spark_jobs import (
    JOB_FILE,
    epochal_cli,
    expected_updates,
    launches,
    run_and_kill,
    wait_until,
    wordcount_env,
    write_corpus,
)

pytestmark = [pytest.mark.spark, pytest.mark.fault]

TRIALS = 6  # on classic Spark (each about 9 s); the chaos suite kills workers at random moments too
CONNECT_TRIALS = 4


def _run_and_kill(
    any_spark: Any, corpus: str, out: str, ckpt: str, rng: random.Random, after_checkpoint: bool
) -> tuple[JobResult, SparkExecutor]:
    env = wordcount_env(corpus, out, ckpt, spark=any_spark)
    # after a checkpoint: there is state to restore; else any moment, start-up included
    delay = (0.0, 2.0) if after_checkpoint else (0.3, 4.0)
    return run_and_kill(any_spark, env, "wordcount", ckpt, rng, after_checkpoint=after_checkpoint, delay=delay)


def test_sigkill_of_a_worker_at_a_random_moment_loses_and_duplicates_nothing(any_spark: Any, tmp_path: Path) -> None:
    corpus = str(tmp_path / "corpus")
    write_corpus(corpus)
    expected = expected_updates(corpus)
    restored_from_checkpoint = 0
    trials = CONNECT_TRIALS if is_connect(any_spark) else TRIALS
    for trial in range(trials):
        rng = random.Random(trial)
        out, ckpt = str(tmp_path / f"out{trial}"), str(tmp_path / f"ckpt{trial}")
        result, executor = _run_and_kill(any_spark, corpus, out, ckpt, rng, after_checkpoint=trial % 2 == 1)
        assert sorted(map(tuple, read_committed(out))) == expected, f"trial {trial}"
        assert result.restarts == 1, f"trial {trial}: the kill must have caused exactly one restart"
        assert launches(executor) == 1, f"trial {trial}: the stage was relaunched, not the worker replaced"
        assert executor.recovery_seconds, f"trial {trial}: recovery was not measured"
        restored_from_checkpoint += result.restored_from[-1] is not None
    # Half the kills land after a checkpoint completed: restores from state are exercised.
    assert restored_from_checkpoint >= trials // 2


def test_sigkill_of_a_whole_spark_task_relaunches_the_stage_and_loses_nothing(spark: Any, tmp_path: Path) -> None:
    """The supervisor killed (as when the executor is lost): the worker dies with it, the stage
    fails, and the job master relaunches it; the output is still exact."""
    corpus = str(tmp_path / "corpus")
    write_corpus(corpus)
    for trial in range(2):
        out, ckpt = str(tmp_path / f"out{trial}"), str(tmp_path / f"ckpt{trial}")
        env = wordcount_env(corpus, out, ckpt, spark=spark)
        result, executor = run_and_kill(
            spark, env, "wordcount", ckpt, random.Random(trial), after_checkpoint=trial == 1, delay=(0.0, 2.0),
            whole_task=True,
        )
        assert sorted(map(tuple, read_committed(out))) == expected_updates(corpus), f"trial {trial}"
        assert result.restarts == 1 and launches(executor) == 2, f"trial {trial}: {executor.timeline}"


@pytest.mark.parametrize("sink_format", ["csv", "parquet"])
def test_sigkill_with_csv_and_parquet_files_commits_every_update_once(
    spark: Any, tmp_path: Path, sink_format: str
) -> None:
    corpus, out, ckpt = str(tmp_path / "corpus"), str(tmp_path / "out"), str(tmp_path / "ckpt")
    write_corpus(corpus)
    env = wordcount_env(corpus, out, ckpt, spark=spark, sink_format=sink_format)
    result, _ = run_and_kill(spark, env, "wordcount", ckpt, random.Random(5), delay=(0.0, 2.0))
    assert result.restarts == 1 and result.restored_from[-1] is not None
    assert sorted(map(tuple, read_committed(out))) == expected_updates(corpus)
    assert {os.path.splitext(n)[1] for n in os.listdir(out) if n.startswith("part-")} == {f".{sink_format}"}


def test_killing_the_whole_run_then_resuming_from_latest_gives_identical_output(tmp_path: Path) -> None:
    _kill_the_run_then_resume(tmp_path, [])


@pytest.mark.connect
def test_killing_a_connect_client_then_resuming_from_latest_gives_identical_output(
    connect_url: str, tmp_path: Path
) -> None:
    """`epochal run --master sc://...`: the client process (and the job master in it) dies, the
    Connect server and its executors live on; the orphaned workers lose the job master and leave,
    freeing their slots, and a new client resumes."""
    _kill_the_run_then_resume(tmp_path, ["--master", connect_url])


def _kill_the_run_then_resume(tmp_path: Path, args: list[str]) -> None:
    corpus, out, ckpt = str(tmp_path / "corpus"), str(tmp_path / "out"), str(tmp_path / "ckpt")
    write_corpus(corpus)
    expected = expected_updates(corpus)
    env = {**os.environ, "EPOCHAL_TEST_CORPUS": corpus, "EPOCHAL_TEST_OUT": out, "EPOCHAL_TEST_CKPT": ckpt}
    first = epochal_cli(["run", JOB_FILE, "--checkpoint-dir", ckpt, *args], env)
    committed = os.path.join(out, "part-*")  # a checkpoint completed and its output was committed
    wait_until(lambda: bool(glob.glob(committed)) or first.poll() is not None, "output was committed", 180)
    assert first.poll() is None, "the job ended before its first commit"
    time.sleep(random.Random(1).uniform(0.2, 1.5))  # the moment of the kill
    os.killpg(first.pid, signal.SIGKILL)  # the driver, its JVM and every Python worker (Connect: the client)
    assert first.wait() == -signal.SIGKILL, "the run had ended before the kill"
    # Checkpoints committed part of the output. A resumed run that started over instead of
    # restoring would commit those updates a second time.
    committed_before = len(read_committed(out))
    assert 0 < committed_before < len(expected)
    second = epochal_cli(["run", JOB_FILE, "--checkpoint-dir", ckpt, "--from-checkpoint", "latest", *args], env)
    _, err = second.communicate(timeout=300)
    assert second.returncode == 0, err.decode()[-3000:]
    assert sorted(map(tuple, read_committed(out))) == expected
