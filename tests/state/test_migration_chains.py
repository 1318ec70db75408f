"""Chains through live migration: a new owner writes the key groups it gained as the old owner's
sections, copied byte for byte (`ResetSection`), not pickled again; an old owner replaces the
groups it lost by nothing. Every checkpoint's chains must still read back as the live state."""

from __future__ import annotations

import random

import pytest

from epochal.plan.job_graph import TaskId
from epochal.runtime.operators import OperatorSnapshot
from epochal.runtime.task.snapshots import prepare_groups, read_groups, read_keyed_chain, write_task_snapshot
from epochal.state.heap import HeapKeyedStateBackend
from epochal.state.keygroups import key_group_of, key_group_set
from epochal.state.manifest import Manifest, OperatorState
from epochal.state.storage import CheckpointStorage

GROUPS = 16


class Counted:
    """A value that counts how often it is pickled."""

    pickled = 0

    def __init__(self, n: int) -> None:
        self.n = n

    def __reduce__(self):  # noqa: ANN204
        Counted.pickled += 1
        return (Counted, (self.n,))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Counted) and other.n == self.n

    def __hash__(self) -> int:
        return hash(self.n)


class Job:
    """Two heap backends, one operator "op", checkpoints written as the runtime writes them."""

    def __init__(self, storage: CheckpointStorage) -> None:
        self.storage = storage
        self.owner = [0 if g < GROUPS // 2 else 1 for g in range(GROUPS)]
        self.backends = [HeapKeyedStateBackend(self.held(s), GROUPS, compact_every=100, compact_ratio=100.0)
                         for s in (0, 1)]
        self.model: dict[tuple[str, object], object] = {}
        self.manifest: Manifest | None = None

    def held(self, subtask: int):  # noqa: ANN201
        return key_group_set(g for g in range(GROUPS) if self.owner[g] == subtask)

    def update(self, key: object, value: object) -> None:
        backend = self.backends[self.owner[key_group_of(key, GROUPS)]]
        backend.set_current_key(key)
        if value is None:
            backend.delete("s")
            self.model.pop(("s", key), None)
        else:
            backend.put("s", value)
            self.model[("s", key)] = value

    def checkpoint(self, checkpoint_id: int, complete: bool = True) -> Manifest:
        subtasks = []
        for s, backend in enumerate(self.backends):
            snap = OperatorSnapshot(keyed=backend.snapshot(checkpoint_id))
            states, _ = write_task_snapshot(self.storage, checkpoint_id, TaskId(0, s), backend.key_groups,
                                            [("op", snap)])
            backend.on_snapshot_written(checkpoint_id, states[0].state.keyed_chain())
            subtasks.append(states[0].state)
        manifest = Manifest(checkpoint_id, "j", 0.0, 0.0, (OperatorState("op", 2, GROUPS, tuple(subtasks)),))
        if complete:
            self.storage.write_manifest(manifest)
            for backend in self.backends:
                backend.notify_checkpoint_complete(checkpoint_id)
            self.manifest = manifest
        return manifest

    def restored(self, manifest: Manifest) -> dict[tuple[str, object], object]:
        out: dict[tuple[str, object], object] = {}
        for st in manifest.operators[0].subtasks:
            held = st.holds()
            for states in read_keyed_chain(self.storage, st.keyed_chain(), held).values():
                for name, entries in states.items():
                    out.update(((name, k), v) for k, v in entries.items())
        return out


def _move(job: Job, groups: list[int], to: int, checkpoint_id: int, pre_copy: bool) -> None:
    """Steps 3-5 of `runtime.master.migrations`: the rerouting checkpoint, then the adoption."""
    source = 1 - to
    prepared = prepare_groups(job.storage, job.manifest, ["op"], key_group_set(groups)) if pre_copy else None
    manifest = job.checkpoint(checkpoint_id)
    for g in groups:
        job.owner[g] = to
    job.backends[source].reassign(job.held(source), {})
    state, copies = read_groups(job.storage, manifest, "op", key_group_set(groups), prepared)
    assert set(copies) == {g for g in groups if g in state}
    job.backends[to].reassign(job.held(to), state, copies)


@pytest.mark.parametrize("seed", range(6))
def test_chains_read_back_exactly_through_moves_back_and_forth(tmp_path, seed: int) -> None:
    rng = random.Random(seed)
    job = Job(CheckpointStorage(str(tmp_path)))
    keys = list(range(300)) + [f"k{i}" for i in range(100)]
    for key in keys:
        job.update(key, rng.randrange(1000))
    job.checkpoint(1)
    for checkpoint_id in range(2, 30):
        for _ in range(rng.randrange(5, 80)):
            job.update(rng.choice(keys), None if rng.random() < 0.2 else rng.randrange(1000))
        roll = rng.random()
        if roll < 0.4:
            to = rng.randrange(2)
            mine = [g for g in range(GROUPS) if job.owner[g] == 1 - to]
            if len(mine) > 1:
                _move(job, rng.sample(mine, rng.randrange(1, len(mine))), to, checkpoint_id, rng.random() < 0.7)
                continue
        manifest = job.checkpoint(checkpoint_id, complete=roll > 0.5 or roll < 0.4)  # some are aborted
        if manifest is job.manifest:
            assert job.restored(manifest) == job.model, f"checkpoint {checkpoint_id}"
    final = job.checkpoint(100)
    assert job.restored(final) == job.model


def test_a_new_owner_writes_what_it_gained_without_pickling_it_again(tmp_path) -> None:
    job = Job(CheckpointStorage(str(tmp_path)))
    keys = range(80_000)  # sections of several frames each (`FRAME_ENTRIES`)
    for key in keys:
        job.update(key, Counted(key))
    first = job.checkpoint(1).operators[0].subtasks[0].keyed  # the groups that move, in full
    moving = list(range(GROUPS // 2))
    _move(job, moving, 1, 2, pre_copy=True)
    job.update(0 if key_group_of(0, GROUPS) in moving else 1, Counted(-1))  # one change after the move
    Counted.pickled = 0
    manifest = job.checkpoint(3)
    assert Counted.pickled == 1  # the changed value only, not ~40,000 moved ones
    assert job.restored(manifest) == job.model
    delta = manifest.operators[0].subtasks[1].keyed
    assert first is not None and delta is not None and delta.size > first.size  # their bytes, copied


class Value:
    """A value whose freeing shows (a weak reference to it dies)."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Value) and other.n == self.n

    def __hash__(self) -> int:
        return self.n


def test_groups_moved_away_are_freed_after_the_snapshot_holding_them_is_written(tmp_path) -> None:
    import time
    import weakref

    backend = HeapKeyedStateBackend(key_group_set(range(GROUPS)), GROUPS)
    values = {key: Value(key) for key in range(5_000)}
    for key, value in values.items():
        backend.set_current_key(key)
        backend.put("s", value)
    gone = [k for k in values if key_group_of(k, GROUPS) < GROUPS // 2]
    refs = [weakref.ref(values[k]) for k in gone]
    snap = backend.snapshot(1)
    backend.reassign(key_group_set(range(GROUPS // 2, GROUPS)), {})
    del values, value  # the loop variable holds the last one
    time.sleep(0.3)  # the reaper, were it handed the maps now, would have emptied them
    assert sorted(k for _, states in snap.full_sections() for k in states["s"]) == list(range(5_000))
    assert all(r() is not None for r in refs)
    backend.on_snapshot_written(1, ())
    deadline = time.monotonic() + 10
    while any(r() is not None for r in refs) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert all(r() is None for r in refs)  # freed, by the reaper


def test_copied_sections_count_as_full_file_when_a_chain_is_compacted(tmp_path) -> None:
    job = Job(CheckpointStorage(str(tmp_path)))
    for backend in job.backends:
        backend.tracker.compact_ratio = 1.0  # the default: deltas may weigh as much as the full file
    for key in range(4_000):
        job.update(key, key)
    job.checkpoint(1)
    _move(job, list(range(GROUPS // 2)), 1, 2, pre_copy=True)  # as much as subtask 1 held moves there
    for checkpoint_id in range(3, 8):
        job.update(checkpoint_id, -checkpoint_id)
        chain = job.checkpoint(checkpoint_id).operators[0].subtasks[1].keyed_chain()
        assert len(chain) == checkpoint_id - 1  # deltas still (2 wrote nothing): no full file again
    assert job.restored(job.manifest) == job.model
