"""Message logs on Spark, with real servers: a running count per user from JetStream or Redis
streams into the same kind of log, exactly once, read back with the server's own client.

- A Spark worker SIGKILLed mid-stream, with messages arriving before, during and after, on a
  partition created while the job runs too: every update committed once.
- The driver (its JVM and Python workers with it) SIGKILLed mid-run, and the same command run
  again (`--from-checkpoint auto`): it resumes, reads each partition from its checkpointed
  cursor up to the bounded end the first run saw (a partition created since, to its end now),
  re-commits what the checkpoint had pending (skipped where the first run committed it) and
  ends with the failure-free output.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from epochal import JobCancelledError
from epochal.cluster.spark import SparkExecutor
from epochal.runtime.master.control import JobControl
from spark_jobs import count_updates, epochal_cli, log_clicks, log_counts_env, run_in_background, wait_until

pytestmark = [pytest.mark.spark, pytest.mark.fault]

KINDS = ["nats", "redis"]


class _Log:
    """The test's view of one kind of log: publish clicks, read committed updates back."""

    def __init__(self, kind: str, server: Any) -> None:
        self.kind, self.server = kind, server
        if kind == "nats":
            server.add_stream("CLICKS", ["clicks.*"])
            server.add_stream("COUNTS", ["counts.>"])

    def publish(self, partition: int, payloads: list[bytes]) -> None:
        if self.kind == "nats":
            self.server.publish([(f"clicks.{partition}", p) for p in payloads])
        else:
            self.server.add(f"clicks:{partition}", payloads)

    def committed(self) -> list[tuple[str, int]]:
        if self.kind == "nats":
            payloads = [data for _, data, _ in self.server.messages("COUNTS")]
        else:
            payloads = self.server.entries("counts")
        return sorted((r["user"], r["count"]) for r in map(json.loads, payloads))


@pytest.mark.parametrize("kind", KINDS)
def test_a_worker_killed_mid_stream_commits_every_update_once(
    spark: Any, tmp_path: Path, request: pytest.FixtureRequest, kind: str
) -> None:
    log = _Log(kind, request.getfixturevalue(f"{kind}_server"))
    sent = log_clicks(600, seed=1)
    log.publish(0, sent[:300])
    log.publish(1, sent[300:])
    job = log_counts_env(kind, log.server.url, str(tmp_path / "ckpt"), spark=spark).job_graph(f"{kind}-kill")
    executor, control = SparkExecutor(spark), JobControl(job.name, 2)
    thread, outcome = run_in_background(executor, job, control)
    try:
        wait_until(lambda: len(executor.worker_pids) == 2, "both workers said hello")
        wait_until(lambda: (control.status().last_checkpoint or 0) >= 2, "two checkpoints completed")
        more = log_clicks(400, seed=2, start=600)
        log.publish(2, more[:200])  # a partition created while the job runs
        os.kill(sorted(executor.worker_pids.values())[1], signal.SIGKILL)
        log.publish(0, more[200:])  # while the stage is relaunched
        wait_until(lambda: control.status().restarts == 1, "the job restarted")
        sent += more
        want = count_updates(sent)
        wait_until(lambda: len(log.committed()) >= len(want) or not thread.is_alive(), "every update committed", 240)
        time.sleep(1.0)  # a duplicate would have a moment to arrive
    finally:
        control.request_cancel()
        thread.join(timeout=120)
    assert not thread.is_alive()
    assert isinstance(outcome.get("error"), JobCancelledError), outcome
    assert log.committed() == want


@pytest.mark.parametrize("kind", KINDS)
def test_a_killed_driver_resumes_with_the_same_command_and_commits_every_update_once(
    tmp_path: Path, request: pytest.FixtureRequest, kind: str
) -> None:
    log = _Log(kind, request.getfixturevalue(f"{kind}_server"))
    sent = log_clicks(1_500, seed=3)
    log.publish(0, sent[:700])
    log.publish(1, sent[700:])
    want = count_updates(sent)
    ckpt = str(tmp_path / "ckpt")
    jobs = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "jobs", "log_job.py")
    env = {**os.environ, "EPOCHAL_TEST_LOG": kind, "EPOCHAL_TEST_URL": log.server.url, "EPOCHAL_TEST_CKPT": ckpt}
    command = ["run", jobs, "--checkpoint-dir", ckpt, "--from-checkpoint", "auto"]

    first = epochal_cli(command, env)
    wait_until(lambda: len(log.committed()) >= 200 or first.poll() is not None, "updates were committed", 180)
    assert first.poll() is None, "the job ended before the kill"
    os.killpg(first.pid, signal.SIGKILL)  # the driver, its JVM and every Python worker
    first.communicate()
    before = len(log.committed())
    assert 0 < before < len(want)
    log.publish(0, log_clicks(50, seed=4, start=5_000))  # past the stop the first run fixed: not read
    late = log_clicks(50, seed=5, start=6_000)
    log.publish(2, late)  # a partition the first run did not know: read to its end as of the resume

    again = epochal_cli(command, env)
    _, err = again.communicate(timeout=300)
    assert again.returncode == 0, err.decode()[-3000:]
    assert "resuming from checkpoint" in err.decode()
    assert log.committed() == count_updates(sent + late)
