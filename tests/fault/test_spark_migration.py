"""Live key-group migration on Spark, with a worker SIGKILLed at each step of the protocol: at the
rerouting barrier, after the old owner dropped the moving groups (its snapshot not yet written),
and after the new owner read them (not yet taken over). The job restores, moves again, and every
update is committed once; in every committed checkpoint each key group has exactly one owner."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from epochal import CheckpointConfig, EpochalError, JobCancelledError, JobState, RestartStrategy, StreamEnvironment
from epochal.connectors import FileSink, read_committed
from epochal.runtime import fault_points
from epochal.state.keygroups import RoutingTable, key_group_of
from epochal.state.storage import CheckpointStorage
from spark_jobs import EndlessSource, wait_until

pytestmark = [pytest.mark.spark, pytest.mark.fault]

KEYS = 16


def _moves(owners: tuple[int, ...]) -> dict[int, int]:
    """Half of the key groups the keys use, each to the other subtask."""
    groups = sorted({key_group_of(k) for k in range(KEYS)})
    return {g: 1 - owners[g] for g in groups[::2]}


def _one_owner_per_group(ckpt: str) -> None:
    storage = CheckpointStorage(ckpt, create=False)
    for cid in storage.complete_checkpoints():
        op = storage.resolve(cid).operator("counts")
        assert op is not None
        held = [g for st in op.subtasks for g in st.holds()]
        assert sorted(held) == list(range(128)), f"checkpoint {cid}: key groups held {len(held)} times"


@pytest.mark.parametrize("point", ["migration.barrier", "migration.dropped", "migration.adopting"])
def test_a_sigkill_at_each_step_of_a_migration_commits_every_update_once(
    spark: Any, tmp_path: Path, point: str
) -> None:
    markers = tmp_path / "markers"
    context = spark.sparkContext
    context.environment[fault_points.ENV] = f"{point}:{markers}"  # a new worker daemon has it
    try:
        out, ckpt = str(tmp_path / "out"), str(tmp_path / "c")
        env = StreamEnvironment(parallelism=2, executor="spark", spark=spark,
                                checkpoint=CheckpointConfig(interval=0.2, directory=ckpt, retain=1_000),
                                restart=RestartStrategy(max_restarts=3))
        env.from_source(EndlessSource()).key_by(lambda x: x % KEYS).count().uid("counts").sink_to(
            FileSink(out))
        handle = env.execute_async(f"migrated-{point}")
        wait_until(lambda: (handle.status().last_checkpoint or 0) >= 2, "two checkpoints", timeout=120)
        table = RoutingTable.contiguous(2, 128)
        try:
            handle.move_key_groups(_moves(table.owners), timeout=120)
        except EpochalError:
            pass  # the kill abandoned it: the job restores the checkpoint before, groups where they were
        assert (markers / point).exists(), f"fault point {point} never fired"
        wait_until(lambda: handle.status().state is JobState.RUNNING and handle.status().restarts == 1,
                   "restarted", timeout=120)
        # the fault fired once; the moves now go through, there and back
        moved = CheckpointStorage(ckpt, create=False).resolve("latest").routing
        current = moved.owners if moved is not None else table.owners
        there = _moves(current)
        handle.move_key_groups(there, timeout=120)
        last = handle.move_key_groups({g: current[g] for g in there}, timeout=120)  # and back
        wait_until(lambda: (handle.status().last_checkpoint or 0) >= last + 2, "ran on", timeout=120)
        handle.cancel()
        with pytest.raises(JobCancelledError):
            handle.result(timeout=120)
    finally:
        context.environment.pop(fault_points.ENV, None)
    per_key: dict[int, list[int]] = {}
    for key, count in (tuple(u) for u in read_committed(out)):
        per_key.setdefault(key, []).append(count)
    assert len(per_key) == KEYS
    assert all(sorted(c) == list(range(1, len(c) + 1)) for c in per_key.values())  # once each, none lost
    _one_owner_per_group(ckpt)
    assert os.listdir(markers) == [point]
