"""Fault tests on local Spark: real worker processes and drivers killed with SIGKILL.

Each asserts the exact committed output: every `(word, n)` update once, nothing lost, nothing
duplicated, whatever the moment of the kill.
"""

from __future__ import annotations

import glob
import os
import random
import signal
import subprocess
import sys
import threading
import time

import pytest

from epochal.cluster.spark import SparkExecutor
from epochal.connectors import read_committed
from spark_jobs import expected_updates, wordcount_env, write_corpus

pytestmark = [pytest.mark.spark, pytest.mark.fault]

TRIALS = 10
JOB_FILE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "jobs", "wordcount_job.py")


def _run_and_kill(spark, corpus: str, out: str, ckpt: str, rng: random.Random, after_checkpoint: bool):
    env = wordcount_env(corpus, out, ckpt, spark=spark)
    executor = SparkExecutor(spark)
    outcome: dict[str, object] = {}

    def run() -> None:
        try:
            outcome["result"] = executor.execute(env.job_graph("wordcount"))
        except BaseException as exc:  # noqa: BLE001 - re-raised in the test thread
            outcome["error"] = exc

    thread = threading.Thread(target=run)
    thread.start()
    deadline = time.monotonic() + 120
    while len(executor.worker_pids) < 2 and time.monotonic() < deadline:
        time.sleep(0.02)
    if after_checkpoint:  # a moment when there is state to restore
        while not glob.glob(os.path.join(ckpt, "chk-*", "MANIFEST.json")) and time.monotonic() < deadline:
            time.sleep(0.02)
        time.sleep(rng.uniform(0.0, 2.0))
    else:  # any moment, start-up included
        time.sleep(rng.uniform(0.3, 4.0))
    victim = rng.choice(sorted(executor.worker_pids.values()))
    os.kill(victim, signal.SIGKILL)
    thread.join(timeout=300)
    assert not thread.is_alive(), "the job did not finish after the kill"
    if "error" in outcome:
        raise outcome["error"]  # type: ignore[misc]
    return outcome["result"], executor


def test_sigkill_of_a_worker_at_a_random_moment_loses_and_duplicates_nothing(spark, tmp_path) -> None:
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


def _wait_for_checkpoint(ckpt: str, proc: subprocess.Popen, timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if glob.glob(os.path.join(ckpt, "chk-*", "MANIFEST.json")):
            return
        assert proc.poll() is None, "the job ended before its first checkpoint"
        time.sleep(0.05)
    raise AssertionError("no checkpoint completed in time")


def _cli(args: list[str], env: dict[str, str], **kw):
    return subprocess.Popen(
        [sys.executable, "-m", "epochal.cli.main", *args], env=env, start_new_session=True,
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, **kw,
    )


def test_killing_the_whole_run_then_resuming_from_latest_gives_identical_output(tmp_path) -> None:
    corpus, out, ckpt = str(tmp_path / "corpus"), str(tmp_path / "out"), str(tmp_path / "ckpt")
    write_corpus(corpus)
    env = {**os.environ, "EPOCHAL_TEST_CORPUS": corpus, "EPOCHAL_TEST_OUT": out, "EPOCHAL_TEST_CKPT": ckpt}
    first = _cli(["run", JOB_FILE, "--checkpoint-dir", ckpt], env)
    _wait_for_checkpoint(ckpt, first)
    time.sleep(random.Random(1).uniform(0.2, 1.5))
    os.killpg(first.pid, signal.SIGKILL)  # the driver, its JVM and every Python worker
    assert first.wait() == -signal.SIGKILL, "the run had ended before the kill"
    second = _cli(["run", JOB_FILE, "--checkpoint-dir", ckpt, "--from-checkpoint", "latest"], env)
    _, err = second.communicate(timeout=300)
    assert second.returncode == 0, err.decode()[-3000:]
    assert sorted(map(tuple, read_committed(out))) == expected_updates(corpus)


def test_the_same_job_passes_on_local_cluster_with_separate_executors(tmp_path) -> None:
    corpus, out, ckpt = str(tmp_path / "corpus"), str(tmp_path / "out"), str(tmp_path / "ckpt")
    write_corpus(corpus, files=2, lines=500)
    env = {
        **os.environ, "EPOCHAL_TEST_CORPUS": corpus, "EPOCHAL_TEST_OUT": out, "EPOCHAL_TEST_CKPT": ckpt,
        "EPOCHAL_TEST_SLOW": "0",
    }
    proc = _cli(["run", JOB_FILE, "--master", "local-cluster[2,1,1024]", "--checkpoint-dir", ckpt], env)
    _, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err.decode()[-3000:]
    assert sorted(map(tuple, read_committed(out))) == expected_updates(corpus)
