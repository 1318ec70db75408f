"""Live key-group migration on Spark under faults no fault point times (issue 18's proof; the
protocol's own steps are `test_spark_migration.py`): workers SIGKILLed at random moments while
key groups move back and forth, in batches and all at once; the old and the new owner of moving
groups killed together; the driver killed mid-move and the job started again from its latest
checkpoint. Every time the committed output is exactly a failure-free run's (`migration_chaos`:
each key's updates numbered, so a loss or a duplicate shows), and in every complete checkpoint
each key group is held once, where the checkpoint's routing table says."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

import chaos
import migration_chaos as mc
from epochal import EpochalError, JobHandle, JobState
from epochal.cluster.spark import SparkExecutor
from epochal.connectors import read_committed
from epochal.runtime import fault_points
from epochal.runtime.master.control import JobControl
from epochal.state.storage import CheckpointStorage
from spark_jobs import complete_checkpoints, epochal_cli, wait_until

pytestmark = [pytest.mark.spark, pytest.mark.fault]


@pytest.fixture(scope="module")
def shipped() -> None:
    from pyspark import cloudpickle

    cloudpickle.register_pickle_by_value(mc)  # type: ignore[no-untyped-call]


def _start(spark: Any, out: str, ckpt: str, per_key: int, backups: int = 0) -> tuple[JobHandle, SparkExecutor]:
    """The job on its own executor (whose workers' pids a test kills), behind a `JobHandle`."""
    graph = mc.job_env(spark, out, ckpt, per_key, backups=backups).job_graph("migrating")
    executor, control = SparkExecutor(spark), JobControl(graph.name, 2)
    handle = JobHandle(control, lambda: executor.execute(graph, None, control), None, None)
    wait_until(lambda: len(executor.worker_pids) == 2 or handle.done(), "both workers said hello")
    wait_until(lambda: bool(complete_checkpoints(ckpt)) or handle.done(), "a checkpoint completed")
    assert not handle.done(), "the job ended before its first checkpoint"
    return handle, executor


def _running(handle: JobHandle, restarts: int) -> bool:
    status = handle.status()
    return handle.done() or (status.state is JobState.RUNNING and status.restarts >= restarts)


# -- 1. random kills while key groups move ------------------------------------------------------------
@pytest.mark.parametrize("backups", [0, 1], ids=["restore", "peer-backups"])
def test_workers_killed_at_random_while_key_groups_move_back_and_forth_commit_every_update_once(
    spark: Any, tmp_path: Path, shipped: None, backups: int
) -> None:
    """Three SIGKILLs of a random worker, each at a random moment while a move is with the job
    (`backups=1`: the lost groups restore on their holders and move back live, itself a move the
    next kill may hit)."""
    per_key, kills = 350, 3
    rng = random.Random(18 + backups)
    out, ckpt = str(tmp_path / "out"), str(tmp_path / "c")
    handle, executor = _start(spark, out, ckpt, per_key, backups)
    mover = mc.Mover(handle, random.Random(rng.random()))
    mover.start()
    killed = mid_move = 0
    try:
        while killed < kills and not handle.done():
            time.sleep(rng.uniform(0.0, 0.8))  # the moments: random, spread over the run
            wait_until(lambda: mover.moving.is_set() or handle.done(), "a move under way", 60)
            time.sleep(rng.uniform(0.0, 0.2))
            victim = rng.choice(sorted(executor.worker_pids.values()))
            if handle.done():
                break
            mid_move += mover.moving.is_set()
            os.kill(victim, signal.SIGKILL)
            killed += 1
            # recovered: every worker runs again (a kill during recovery is the chaos runner's)
            wait_until(lambda k=killed: handle.done() or len(executor.recovery_seconds) >= k, "recovered", 120)
        result = handle.result(timeout=300)
    finally:
        handle.cancel()
        mover.stop()
    mc.check_output(out, per_key)
    tables = mc.check_owners(ckpt, executor.recovery_tables)
    assert killed == kills == result.restarts, f"{killed} kills, {result.restarts} restarts: {result.failures}"
    assert mid_move >= 2 and mover.abandoned >= 1, f"kills mid-move {mid_move}, moves abandoned {mover.abandoned}"
    assert mover.done >= 2 and len({t.owners for _, t in tables}) >= 3, "the key groups hardly moved"


# -- 2. the old and the new owner killed together ---------------------------------------------------
def _move_in_background(
    handle: JobHandle, moves: dict[int, int], batch: int | None
) -> tuple[threading.Thread, list[Any]]:
    """`handle.move_key_groups` on a thread; what it returned or raised ends up in the list."""
    outcome: list[Any] = []

    def move() -> None:
        try:
            outcome.append(handle.move_key_groups(moves, batch=batch, timeout=120))
        except EpochalError as exc:
            outcome.append(exc)

    thread = threading.Thread(target=move)
    thread.start()
    return thread, outcome


def _kill_at_a_point_and_the_other_at_once(spark: Any, tmp_path: Path, point: str) -> None:
    """Subtask 0's key groups moved to subtask 1, all at once; the process that reaches `point`
    (the old owner at `migration.dropped`, the new one at `migration.adopting`) dies there, and
    the other worker as soon as the point's marker shows it."""
    markers, per_key = tmp_path / "markers", 250
    out, ckpt = str(tmp_path / "out"), str(tmp_path / "c")
    context = spark.sparkContext
    context.environment[fault_points.ENV] = f"{point}:{markers}"  # a new worker daemon has it
    try:
        handle, executor = _start(spark, out, ckpt, per_key)
        try:
            workers = set(executor.worker_pids.values())
            thread, outcome = _move_in_background(handle, dict.fromkeys(mc.used_groups(0), 1), None)
            marker = markers / point
            deadline = time.monotonic() + 60
            while not (marker.exists() and marker.read_text().endswith("\n")):
                assert time.monotonic() < deadline and thread.is_alive(), f"{point} never fired: {outcome}"
                time.sleep(0.001)
            (other,) = workers - {int(marker.read_text())}
            os.kill(other, signal.SIGKILL)
            thread.join(timeout=120)
            assert len(outcome) == 1 and "abandoned" in str(outcome[0]), outcome
            result = handle.result(timeout=300)
        finally:
            handle.cancel()
    finally:
        context.environment.pop(fault_points.ENV, None)
    mc.check_output(out, per_key)
    mc.check_owners(ckpt)
    assert result.restarts >= 1, result


def _kill_both_mid_batched_move(spark: Any, tmp_path: Path) -> None:
    """Every used key group to the other subtask, one per checkpoint; both workers (each an old
    and a new owner) killed at once when a checkpoint shows the move partly done. Moves go on
    after the restart."""
    per_key = 300
    out, ckpt = str(tmp_path / "out"), str(tmp_path / "c")
    handle, executor = _start(spark, out, ckpt, per_key)
    storage = CheckpointStorage(ckpt, create=False)
    swap = {g: 1 - mc.START.owners[g] for g in mc.used_groups()}
    mover = mc.Mover(handle, random.Random(0))

    def moved() -> int:
        owners = mc.table_of(storage, "latest").owners
        return sum(owners[g] == to for g, to in swap.items())

    try:
        thread, outcome = _move_in_background(handle, swap, 1)
        wait_until(lambda: moved() >= 1 or handle.done(), "a step of the move", 60)
        for pid in list(executor.worker_pids.values()):
            os.kill(pid, signal.SIGKILL)
        assert moved() < len(swap) - 1, "the move was nearly done before the kill"
        thread.join(timeout=120)
        assert len(outcome) == 1 and "abandoned" in str(outcome[0]), outcome
        wait_until(lambda: _running(handle, 1), "restarted", 120)
        mover.start()  # and moves go on after it
        result = handle.result(timeout=300)
    finally:
        handle.cancel()
        mover.stop()
    mc.check_output(out, per_key)
    mc.check_owners(ckpt)
    assert result.restarts >= 1 and mover.done >= 1, (result.restarts, mover)


@pytest.mark.parametrize("how", ["old-owner-dropped", "new-owner-adopting", "both-mid-batch"])
def test_the_old_and_the_new_owner_killed_together_commit_every_update_once(
    spark: Any, tmp_path: Path, shipped: None, how: str
) -> None:
    if how == "both-mid-batch":
        _kill_both_mid_batched_move(spark, tmp_path)
    else:
        point = {"old-owner-dropped": "migration.dropped", "new-owner-adopting": "migration.adopting"}[how]
        _kill_at_a_point_and_the_other_at_once(spark, tmp_path, point)


# -- 3. the driver killed mid-move, the job started again from its latest checkpoint ---------------------
def test_a_driver_killed_mid_move_resumes_from_the_latest_checkpoint_with_its_routing_table(
    spark: Any, tmp_path: Path, shipped: None
) -> None:
    per_key = 300
    out, ckpt, info = str(tmp_path / "out"), str(tmp_path / "c"), str(tmp_path / "endpoint.json")
    token = uuid.uuid4().hex
    env = {k: v for k, v in os.environ.items() if k != fault_points.ENV}
    with open(tmp_path / "driver.log", "wb") as log:
        driver = subprocess.Popen(
            [sys.executable, mc.__file__, "--driver", out, ckpt, str(per_key), info],
            env={**env, chaos.TOKEN_ENV: token}, start_new_session=True, stdout=log, stderr=subprocess.STDOUT,
        )
    storage = CheckpointStorage(ckpt)
    groups = mc.used_groups(0)

    def moved() -> int:
        owners = mc.table_of(storage, "latest").owners
        return sum(owners[g] == 1 for g in groups)

    try:
        wait_until(lambda: (os.path.exists(info) and bool(complete_checkpoints(ckpt))) or driver.poll() is not None,
                   "the driver's endpoint and first checkpoint", 180)
        assert driver.poll() is None, f"the driver ended (exit {driver.returncode}): see driver.log"
        endpoint = json.loads(Path(info).read_text())
        move = epochal_cli(["move", endpoint["url"], ",".join(map(str, groups)), "1", "--batch", "1",
                            "--token", endpoint["token"]], env)
        wait_until(lambda: moved() >= 1 or driver.poll() is not None, "a step of the move", 60)
        os.killpg(driver.pid, signal.SIGKILL)  # the driver, its JVM, what shares its process group
        driver.wait()
        assert driver.returncode == -signal.SIGKILL, "the driver had ended before the kill"
        move.communicate(timeout=60)
        assert move.returncode != 0, "the move finished before the driver died"
    finally:
        if driver.poll() is None:
            os.killpg(driver.pid, signal.SIGKILL)
            driver.wait()
        chaos._kill_remains(token)  # Spark's Python daemon has a process group of its own
    killed_at = storage.complete_checkpoints()[-1]
    restored = mc.table_of(storage, killed_at)
    assert 1 <= sum(restored.owners[g] == 1 for g in groups) < len(groups), "the kill did not land mid-move"
    assert 0 < len(read_committed(out)) < per_key * mc.KEYS

    result = mc.job_env(spark, out, ckpt, per_key).execute("migrating", from_checkpoint="latest")
    assert result.restored_from[0] == killed_at
    mc.check_output(out, per_key)  # exactly once across both runs
    tables = mc.check_owners(ckpt)
    after = [table for cid, table in tables if cid > killed_at]
    assert after and all(t.owners == restored.owners for t in after), "the resumed run routed by another table"
