"""A live move is cut into steps by the state it moves (`runtime.master.migration_steps`)."""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from tests.api.test_rescale_and_savepoint import SlowSequence, _expected
from tests.migration.test_live_migration import KEYS, _groups_of_keys, _wait_running

from epochal import CheckpointConfig, EpochalError, StateConfig, StreamEnvironment
from epochal.plan.job_graph import JobGraph, TaskId
from epochal.runtime.commands import Move, Ticket
from epochal.runtime.master.control import JobControl
from epochal.runtime.master.migration_steps import group_bytes, plan_steps
from epochal.runtime.master.migrations import Migrations
from epochal.runtime.wire.messages import (
    AcknowledgeCheckpoint,
    AdoptKeyGroups,
    KeyGroupsAdopted,
    KeyGroupsPrepared,
    PrepareKeyGroups,
)
from epochal.state.keygroups import RoutingTable
from epochal.state.manifest import FileHandle, Manifest, OperatorState, SubtaskState
from epochal.state.storage import CheckpointStorage
from epochal.testing import CollectSink

MB = 2**20


def _subtask(index: int, groups: tuple[int, ...], *sizes: int) -> SubtaskState:
    files = [FileHandle(f"f{index}-{n}", size, "") for n, size in enumerate(sizes)]
    return SubtaskState(index, 0, 0, files[-1] if files else None, None, tuple(files[:-1]), groups)


def test_each_group_weighs_its_holders_chain_spread_over_the_groups_it_holds() -> None:
    keyed = OperatorState("count", 2, 8, (_subtask(0, (0, 1, 2, 3), 40 * MB, 4 * MB),
                                          _subtask(1, (4, 5, 6, 7), 8 * MB)))
    window = OperatorState("window", 2, 8, (_subtask(0, (0, 1, 2, 3), 4 * MB), _subtask(1, (4, 5, 6, 7))))
    other = OperatorState("source", 1, 8, (_subtask(0, tuple(range(8)), 800 * MB),))  # not keyed at 2
    sizes = group_bytes(Manifest(1, "j", 0.0, 0.0, (keyed, window, other)), parallelism=2)
    assert sizes == {**dict.fromkeys(range(4), 12 * MB), **dict.fromkeys(range(4, 8), 2 * MB)}


def test_steps_carry_at_most_the_budget_and_at_least_one_group() -> None:
    sizes = {0: 30, 1: 30, 2: 30, 3: 100, 4: 5, 5: 5}
    moves = tuple((g, 1) for g in range(6))
    assert plan_steps(moves, None, sizes, 64) == [{0: 1, 1: 1}, {2: 1}, {3: 1}, {4: 1, 5: 1}]
    assert plan_steps(moves, None, sizes, 0) == [dict(moves)]  # 0: all at once
    assert plan_steps(moves, None, {}, 64) == [dict(moves)]  # no checkpoint to weigh them by yet
    assert plan_steps(moves, 4, sizes, 64) == [dict(moves[:4]), dict(moves[4:])]  # a batch wins
    assert plan_steps((), None, sizes, 64) == []


@pytest.mark.parametrize(("step_bytes", "steps"), [(1, len(_groups_of_keys())), (0, 1)])
def test_a_move_takes_one_checkpoint_per_step_and_commits_every_update_once(
        tmp_path: Path, step_bytes: int, steps: int) -> None:
    sink = CollectSink()
    env = StreamEnvironment(parallelism=2, executor="inprocess", state=StateConfig(migration_step_bytes=step_bytes),
                            checkpoint=CheckpointConfig(interval=0.2, directory=str(tmp_path / "c"), retain=1000))
    env.from_source(SlowSequence()).key_by(lambda x: x % KEYS).count().uid("count").sink_to(sink)
    handle = env.execute_async("stepped")
    _wait_running(handle)
    deadline = time.monotonic() + 30
    while handle.status().last_checkpoint is None:  # the steps are weighed by a checkpoint's files
        assert time.monotonic() < deadline
        time.sleep(0.01)
    contiguous = RoutingTable.contiguous(2, 128)
    handle.move_key_groups({g: 1 - contiguous.owners[g] for g in _groups_of_keys()}, timeout=30)
    handle.result(timeout=60)
    assert Counter(sink.committed()) == _expected()
    storage = CheckpointStorage(str(tmp_path / "c"))
    routing = storage.resolve("latest").routing
    assert routing is not None and routing.version == steps  # one table version per step
    versions = [table.version if (table := storage.resolve(cid).routing) else 0 for cid in storage.checkpoint_ids()]
    for version in range(1, steps):  # each step's groups written by their new owners before the next step
        assert versions.count(version) >= 2, versions


def _coordinator(*ids: int) -> Any:
    triggered: list[RoutingTable | None] = []

    def trigger(reroute: RoutingTable | None = None) -> int:
        triggered.append(reroute)
        return 100 + len(triggered)

    manifests = [Manifest(i, "steps", 0.0, 0.0, ()) for i in ids]  # no state to weigh: `batch` cuts the steps
    return SimpleNamespace(completed=[SimpleNamespace(checkpoint_id=m.checkpoint_id, manifest=m) for m in manifests],
                           trigger=trigger, triggered=triggered, migrated=lambda: None, is_stopped=False,
                           final_checkpoint=None, routing=None, pending={})


def _migrations(tmp_path: Path, name: str) -> tuple[JobGraph, Migrations, list[tuple[TaskId, object]]]:
    """A job master's migrations for a keyed count at parallelism 2, and what they send to tasks."""
    env = StreamEnvironment(parallelism=2, checkpoint=CheckpointConfig(directory=str(tmp_path)))
    env.from_source(SlowSequence()).key_by(lambda x: x % KEYS).count().uid("count").sink_to(CollectSink())
    job = env.job_graph(name)
    sent: list[tuple[TaskId, object]] = []
    migrations = Migrations(job, JobControl(name, 2), True)
    migrations.send = lambda task, message: sent.append((task, message))
    return job, migrations, sent


def test_the_next_step_waits_for_a_checkpoint_after_the_last_one_or_its_abort(tmp_path: Path) -> None:
    _, migrations, sent = _migrations(tmp_path, "steps")
    command = Ticket(Move(((0, 1), (1, 1)), batch=1))
    coordinator = _coordinator(5)
    migrations.move(command, coordinator)  # step 1: read ahead from 5
    (owner,) = migrations.current.new_owners
    migrations.prepared(KeyGroupsPrepared(owner, 5, read=True), coordinator)
    rerouting = migrations.current.checkpoint_id
    migrations.completed(SimpleNamespace(checkpoint_id=rerouting, manifest="m"), lambda t, m: None, coordinator)
    migrations.adopted(KeyGroupsAdopted(owner, rerouting), coordinator)
    assert migrations.busy and migrations.current is None and coordinator.triggered[-1] is None  # a plain one
    after = migrations.waiting.after
    sent.clear()
    migrations.completed(SimpleNamespace(checkpoint_id=after - 1, manifest="m"), lambda t, m: None, coordinator)
    assert migrations.waiting is not None and sent == []  # not the checkpoint that writes step 1's groups
    migrations.aborted(after, coordinator)  # it failed: step 2 starts all the same
    assert migrations.waiting is None and migrations.current is not None
    assert [type(m) for _, m in sent] == [PrepareKeyGroups]
    migrations.abandon("a worker died")
    with pytest.raises(EpochalError, match="abandoned"):
        command.wait(0)


def _one_step_moved(tmp_path: Path, command: Ticket[int]) -> tuple[Migrations, Any, int]:
    """`command` (a move of one step) taken over by its new owner, on a job master of fakes."""
    _, migrations, _ = _migrations(tmp_path, "last step")
    coordinator = _coordinator(5)
    migrations.move(command, coordinator)
    (owner,) = migrations.current.new_owners
    migrations.prepared(KeyGroupsPrepared(owner, 5, read=True), coordinator)
    rerouting = migrations.current.checkpoint_id
    migrations.completed(SimpleNamespace(checkpoint_id=rerouting, manifest="m"), lambda t, m: None, coordinator)
    migrations.adopted(KeyGroupsAdopted(owner, rerouting), coordinator)
    return migrations, coordinator, rerouting


def test_a_move_returns_once_a_checkpoint_wrote_its_last_step_at_the_new_owners(tmp_path: Path) -> None:
    # Else the next move reads ahead from the rerouting checkpoint, whose manifest still shows the
    # groups at their old owners, and reads them whole while its input waits (8.2 s at 1 GB).
    command = Ticket(Move(((0, 1), (1, 1))))
    migrations, coordinator, rerouting = _one_step_moved(tmp_path, command)
    assert migrations.busy and coordinator.triggered[-1] is None  # a plain checkpoint after the step
    with pytest.raises(TimeoutError):
        command.wait(0)
    migrations.completed(SimpleNamespace(checkpoint_id=migrations.waiting.after, manifest="m"), lambda t, m: None,
                         coordinator)
    assert not migrations.busy and command.wait(0) == rerouting  # the checkpoint the groups moved at


def test_a_move_whose_last_step_was_taken_stands_when_the_attempt_ends_before_the_next_checkpoint(
        tmp_path: Path) -> None:
    command = Ticket(Move(((0, 1), (1, 1))))
    migrations, _, rerouting = _one_step_moved(tmp_path, command)
    migrations.abandon("a worker died")  # the rerouting checkpoint completed: a restore keeps the move
    assert not migrations.busy and command.wait(0) == rerouting


def test_new_owners_take_over_once_the_old_owners_wrote_their_part_and_the_step_ends_once_it_completed(
        tmp_path: Path) -> None:
    job, migrations, sent = _migrations(tmp_path, "early")
    command = Ticket(Move(((0, 1), (1, 1))))  # groups 0 and 1: subtask 0 to 1
    coordinator = _coordinator(5)
    migrations.move(command, coordinator)
    (owner,) = migrations.current.new_owners
    migrations.prepared(KeyGroupsPrepared(owner, 5, read=True), coordinator)
    rerouting = migrations.current.checkpoint_id
    coordinator.pending[rerouting] = SimpleNamespace(manifest=lambda job: "the acknowledged part")
    (vertex,) = job.keyed_vertices()
    sent.clear()

    def ack(subtask: int) -> None:
        migrations.acknowledged(AcknowledgeCheckpoint(TaskId(vertex, subtask), rerouting, (), None), coordinator)

    ack(1)  # the new owner's own part: it holds none of the moving groups
    assert sent == []
    ack(0)  # the old owner's part is durable: the new owner reads from it, the checkpoint still under way
    assert sent == [(owner, AdoptKeyGroups("the acknowledged part"))]
    migrations.adopted(KeyGroupsAdopted(owner, rerouting), coordinator)
    assert migrations.current is not None and migrations.waiting is None  # no other checkpoint until it completes
    del coordinator.pending[rerouting]
    migrations.completed(SimpleNamespace(checkpoint_id=rerouting, manifest="whole"), lambda t, m: sent.append(m),
                         coordinator)
    assert migrations.current is None and migrations.waiting is not None  # not handed twice
    assert sent == [(owner, AdoptKeyGroups("the acknowledged part"))]
