"""Survivors without a rollback on Spark (`RecoveryConfig(survivors=True)`): a SIGKILLed worker's
tasks restore and replay while the other worker's run on, and the committed output is exactly the
failure-free one (every `(word, n)` of a running count once). Also a second kill while the first
is recovering, and a job that does not qualify, which rolls back as a whole.
"""

from __future__ import annotations

import os
import random
import signal
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from epochal import RecoveryConfig
from epochal.cluster.spark import SparkExecutor
from epochal.connectors import read_committed
from epochal.runtime.master.control import JobControl
from spark_jobs import (
    cancelled_on_failure,
    complete_checkpoints,
    expected_updates,
    launches,
    wait_until,
    wordcount_env,
    write_corpus,
)

pytestmark = [pytest.mark.spark, pytest.mark.fault]


def _job(tmp_path: Path, files: int, trial: int) -> tuple[Any, str, str, str]:
    corpus, out, ckpt = (str(tmp_path / f"{name}{trial}") for name in ("corpus", "out", "ckpt"))
    write_corpus(corpus, files=files, lines=3000 // files, seed=trial)
    env = wordcount_env(corpus, out, ckpt, recovery=RecoveryConfig(survivors=True), restarts=4)
    return env, corpus, out, ckpt


def _run(spark: Any, env: Any, ckpt: str, kill: Any) -> tuple[Any, SparkExecutor]:
    """Run on Spark in a thread; `kill(executor)` once both workers said hello and a checkpoint
    completed; the result and the executor."""
    executor = SparkExecutor(spark)
    job = env.job_graph("survivors")
    control = JobControl(job.name, job.parallelism)
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["result"] = executor.execute(job, control=control)
        except BaseException as exc:  # noqa: BLE001 - re-raised below
            outcome["error"] = exc

    thread = threading.Thread(target=run)
    thread.start()
    with cancelled_on_failure(control, thread):
        wait_until(lambda: len(executor.worker_pids) == 2 or not thread.is_alive(), "both workers said hello")
        wait_until(lambda: bool(complete_checkpoints(ckpt)) or not thread.is_alive(), "a checkpoint completed")
        assert thread.is_alive(), f"the job ended before the kill ({outcome.get('error')!r})"
        kill(executor)
        thread.join(timeout=300)
        assert not thread.is_alive(), "the job did not finish"
    if "error" in outcome:
        raise outcome["error"]
    return outcome["result"], executor


def _kill(executor: SparkExecutor, worker: int) -> int:
    pid = executor.worker_pids[worker]
    os.kill(pid, signal.SIGKILL)
    return pid


def test_only_the_lost_worker_restores_and_every_update_commits_once(spark: Any, tmp_path: Path) -> None:
    for trial in range(3):
        env, corpus, out, ckpt = _job(tmp_path, files=2, trial=trial)
        rng = random.Random(trial)
        victim = rng.randrange(2)

        def kill(executor: SparkExecutor, rng: random.Random = rng, victim: int = victim) -> None:
            time.sleep(rng.uniform(0.0, 1.0))
            _kill(executor, victim)

        result, executor = _run(spark, env, ckpt, kill)
        assert result.restarts == 1, f"trial {trial}"
        assert [lost for lost, _ in executor.survivor_recoveries] == [[victim]], f"trial {trial}: the others ran on"
        assert launches(executor) == 1
        assert sorted(tuple(r) for r in read_committed(out)) == expected_updates(corpus), f"trial {trial}"
        # the whole job's counts: the survivors' and the restored tasks' records once each (issue 40)
        assert result.counts_whole and result.records_out == len(expected_updates(corpus)), result.summary()


def test_a_kill_during_recovery_with_survivors_running(spark: Any, tmp_path: Path) -> None:
    """The restored worker's new process is killed again while it restores or replays: the
    survivors drop, once more, whatever it had sent since the checkpoint."""
    for trial in range(2):
        env, corpus, out, ckpt = _job(tmp_path, files=2, trial=10 + trial)
        rng = random.Random(10 + trial)
        victim = rng.randrange(2)

        def kill(executor: SparkExecutor, rng: random.Random = rng, victim: int = victim) -> None:
            time.sleep(rng.uniform(0.0, 0.5))
            first = _kill(executor, victim)
            replaced = lambda: executor.worker_pids[victim] != first  # noqa: E731
            wait_until(replaced, "the lost worker's new process said hello")
            time.sleep(rng.uniform(0.0, 0.3))  # while it restores, or replays
            _kill(executor, victim)

        result, executor = _run(spark, env, ckpt, kill)
        assert result.restarts == 2, f"trial {trial}"
        assert [lost for lost, _ in executor.survivor_recoveries] == [[victim], [victim]], f"trial {trial}"
        assert sorted(tuple(r) for r in read_committed(out)) == expected_updates(corpus), f"trial {trial}"
        # the whole job's counts: the survivors' and the restored tasks' records once each (issue 40)
        assert result.counts_whole and result.records_out == len(expected_updates(corpus)), result.summary()


def test_a_job_whose_sources_read_several_splits_rolls_back_whole(spark: Any, tmp_path: Path) -> None:
    env, corpus, out, ckpt = _job(tmp_path, files=4, trial=20)  # two files per source subtask

    def kill(executor: SparkExecutor) -> None:
        _kill(executor, 1)

    result, executor = _run(spark, env, ckpt, kill)
    assert result.restarts == 1 and executor.survivor_recoveries == []
    assert sorted(tuple(r) for r in read_committed(out)) == expected_updates(corpus)
