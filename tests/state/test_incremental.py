"""Incremental checkpoints: deltas of changed entries over the last complete checkpoint, bounded
chains, and retention that never deletes a file a retained checkpoint still references."""

from __future__ import annotations

import dataclasses
import gc
import random
import weakref

import pytest

from epochal.plan.job_graph import TaskId
from epochal.runtime.operators import OperatorSnapshot
from epochal.runtime.task.snapshots import read_keyed_chain, write_task_snapshot
from epochal.state.disk import DiskKeyedStateBackend
from epochal.state.handles import ListState, MapState, ValueState
from epochal.state.heap import HeapKeyedStateBackend
from epochal.state.keygroups import KeyGroupRange, key_group_of
from epochal.state.manifest import Manifest, OperatorState
from epochal.state.storage import CheckpointStorage
from epochal.state.verify import verify_checkpoint

ALL = KeyGroupRange(0, 16)


def _backend(kind: str, **options):
    if kind == "disk":
        return DiskKeyedStateBackend(ALL, 16, **options)
    return HeapKeyedStateBackend(ALL, 16, **options)


def _checkpoint(storage, backend, checkpoint_id, retain=100, report_written=True):
    """Snapshot, write, report written (as the task does, on its thread), complete (manifest),
    notify, and apply retention: one full cycle."""
    snap = OperatorSnapshot(keyed=backend.snapshot(checkpoint_id))
    states, written = write_task_snapshot(storage, checkpoint_id, TaskId(0, 0), ALL, [("op", snap)])
    subtask = states[0].state
    if report_written:
        backend.on_snapshot_written(checkpoint_id, subtask.keyed_chain())
    storage.write_manifest(Manifest(checkpoint_id, "j", 0.0, 0.0, (OperatorState("op", 1, 16, (subtask,)),)))
    storage.retain(retain, checkpoint_id)
    backend.notify_checkpoint_complete(checkpoint_id)
    return subtask, written


def _model_state(storage, subtask):
    groups = read_keyed_chain(storage, subtask.keyed_chain())
    out: dict = {}
    for states in groups.values():
        for name, entries in states.items():
            for key, value in entries.items():
                out[(name, key)] = value
    return out


@pytest.mark.parametrize("kind", ["memory", "disk"])
def test_random_changes_restore_exactly_from_every_chain(tmp_path, kind):
    storage = CheckpointStorage(str(tmp_path))
    backend = _backend(kind, compact_every=4, compact_ratio=10.0)
    value, items, tags = ValueState(backend, "v", 0), ListState(backend, "l"), MapState(backend, "m")
    model: dict = {}
    rng = random.Random(7)
    lengths = []
    for checkpoint_id in range(1, 15):
        for _ in range(60):
            key = rng.randrange(200)  # about a quarter of the keys change: deltas pay
            backend.set_current_key(key)
            op = rng.random()
            if op < 0.3:
                value.update(value.value() + 1)
                model[("v", key)] = model.get(("v", key), 0) + 1
            elif op < 0.45:
                items.add(checkpoint_id)
                model[("l", key)] = model.get(("l", key), []) + [checkpoint_id]
            elif op < 0.6:
                tags.put("t", checkpoint_id)
                model[("m", key)] = {"t": checkpoint_id}
            elif op < 0.8:  # the fused per-batch paths track their writes too
                backend.count_into([], "c", [key], [key_group_of(key, 16)])
                model[("c", key)] = model.get(("c", key), 0) + 1
                backend.reduce_into([], "r", [key], [key], [key_group_of(key, 16)], max)
                model[("r", key)] = key
            else:
                value.clear()
                items.clear()
                tags.clear()
                backend.set_current_key(key)
                backend.delete("c")
                for name in "vlmc":
                    model.pop((name, key), None)
        subtask, _ = _checkpoint(storage, backend, checkpoint_id, retain=2)
        lengths.append(len(subtask.keyed_chain()))
        assert _model_state(storage, subtask) == model, f"checkpoint {checkpoint_id}"
    assert max(lengths) == 4  # deltas were written, and compaction bounded the chain
    assert lengths.count(1) >= 3
    backend.close()


@pytest.mark.parametrize("kind", ["memory", "disk"])
def test_a_one_percent_change_writes_about_one_percent(tmp_path, kind):
    storage = CheckpointStorage(str(tmp_path))
    backend = _backend(kind)
    state = ValueState(backend, "v")
    for key in range(2000):
        backend.set_current_key(key)
        state.update(b"x%099d" % key)  # distinct objects: pickle would share equal ones
    _, full = _checkpoint(storage, backend, 1)
    for key in range(0, 2000, 100):  # 1 % of the keys
        backend.set_current_key(key)
        state.update(b"y%099d" % key)
    subtask, delta = _checkpoint(storage, backend, 2)
    assert 0.005 < delta / full < 0.03
    assert len(subtask.keyed_chain()) == 2
    backend.close()


def test_a_snapshot_that_changed_most_entries_is_written_in_full(tmp_path):
    """A delta of most keys is as large as the state and costs more to build: write it full."""
    storage = CheckpointStorage(str(tmp_path))
    backend = _backend("memory")
    state = ValueState(backend, "v")
    for key in range(100):
        backend.set_current_key(key)
        state.update(0)
    _checkpoint(storage, backend, 1)
    chains = []
    for checkpoint_id, changed in ((2, 10), (3, 60), (4, 10)):
        for key in range(changed):
            backend.set_current_key(key)
            state.update(checkpoint_id)
        subtask, _ = _checkpoint(storage, backend, checkpoint_id)
        chains.append(len(subtask.keyed_chain()))
    assert chains == [2, 1, 2]
    assert _model_state(storage, subtask) == {("v", k): 4 if k < 10 else 3 if k < 60 else 0 for k in range(100)}


def test_an_aborted_checkpoint_never_becomes_a_base(tmp_path):
    storage = CheckpointStorage(str(tmp_path))
    backend = _backend("memory")
    state = ValueState(backend, "v")
    backend.set_current_key("a")
    state.update(1)
    _checkpoint(storage, backend, 1)
    backend.set_current_key("b")
    state.update(2)
    backend.snapshot(2)  # taken, never completed: its changed key must reach checkpoint 3's delta
    backend.set_current_key("c")
    state.update(3)
    subtask, _ = _checkpoint(storage, backend, 3)
    assert _model_state(storage, subtask) == {("v", "a"): 1, ("v", "b"): 2, ("v", "c"): 3}


def test_a_state_that_keeps_changing_mostly_goes_unrecorded_until_it_turns_sparse(tmp_path):
    """Recording the changes of a state written in full anyway only costs: it stops, in
    doubling stretches, and a sparse snapshot in between brings the deltas back."""
    storage = CheckpointStorage(str(tmp_path))
    backend = _backend("memory")
    state = ValueState(backend, "v")
    model: dict = {}

    def write(keys, value):
        for key in keys:
            backend.set_current_key(key)
            state.update(value)
            model[("v", key)] = value

    recorded, chains = [], []
    for checkpoint_id in range(1, 23):
        write(range(100) if checkpoint_id <= 16 else range(checkpoint_id, 100, 25), checkpoint_id)
        recorded.append(backend.tracker.tracks_changes)
        subtask, _ = _checkpoint(storage, backend, checkpoint_id)
        chains.append(len(subtask.keyed_chain()))
        assert _model_state(storage, subtask) == model, f"checkpoint {checkpoint_id}"
    # epochs 1 and 2 record (a first checkpoint is all new keys); then 1, 2, 4 and 8 unrecorded
    # epochs between recorded ones, so the sparse writes from 17 on wait for epoch 21
    assert [i for i, r in enumerate(recorded, 1) if r] == [1, 2, 4, 7, 12, 21, 22]
    assert chains == [1] * 20 + [2, 3]


def test_a_subtask_holding_nothing_keeps_recording_changes_for_the_groups_it_gains(tmp_path):
    """A standby subtask (or one whose groups all moved away) changes nothing of nothing: that
    is not "most entries changed" (0 >= 0), which had made it stop recording and write the
    500 MB it gained in full at every checkpoint after a live rescale (measured at 1 GB)."""
    storage = CheckpointStorage(str(tmp_path))
    backend = _backend("memory")
    for checkpoint_id in range(1, 8):  # empty
        _checkpoint(storage, backend, checkpoint_id)
        assert backend.tracker.tracks_changes, f"checkpoint {checkpoint_id}"
    state = ValueState(backend, "v")
    for key in range(100):  # gained
        backend.set_current_key(key)
        state.update(key)
    _checkpoint(storage, backend, 8)
    backend.set_current_key(7)
    state.update(-7)
    subtask, _ = _checkpoint(storage, backend, 9)
    assert len(subtask.keyed_chain()) == 2  # a delta of one entry, not all 100 again


def test_an_unrecorded_epoch_since_the_base_forces_a_full_snapshot(tmp_path):
    """A delta must cover every epoch since its base; one whose changes went unrecorded (its
    checkpoint aborted) leaves nothing to build it from."""
    storage = CheckpointStorage(str(tmp_path))
    backend = _backend("memory")
    state = ValueState(backend, "v")
    for checkpoint_id in (1, 2):  # two mostly-changed snapshots: epoch 3 goes unrecorded
        for key in range(10):
            backend.set_current_key(key)
            state.update(checkpoint_id)
        _checkpoint(storage, backend, checkpoint_id)
    assert not backend.tracker.tracks_changes
    backend.set_current_key(3)
    state.update("lost?")
    backend.snapshot(3)  # taken, never completed: checkpoint 2 stays the base
    assert backend.tracker.tracks_changes
    backend.set_current_key(4)
    state.update("sparse")  # 1 of 10 keys: a delta, were every epoch since the base recorded
    subtask, _ = _checkpoint(storage, backend, 4)
    assert len(subtask.keyed_chain()) == 1
    assert _model_state(storage, subtask)[("v", 3)] == "lost?"


def test_incremental_off_writes_every_checkpoint_in_full(tmp_path):
    storage = CheckpointStorage(str(tmp_path))
    backend = _backend("memory", incremental=False)
    state = ValueState(backend, "v")
    for checkpoint_id in (1, 2, 3):
        backend.set_current_key(checkpoint_id)
        state.update(checkpoint_id)
        subtask, _ = _checkpoint(storage, backend, checkpoint_id)
        assert subtask.keyed_base == ()


def test_retention_keeps_every_file_a_retained_checkpoint_references(tmp_path):
    storage = CheckpointStorage(str(tmp_path))
    backend = _backend("memory", compact_every=3, compact_ratio=100.0)
    state = ValueState(backend, "v")
    kept: list = []
    for checkpoint_id in range(1, 9):
        backend.set_current_key(checkpoint_id % 5)
        state.update(checkpoint_id)
        subtask, _ = _checkpoint(storage, backend, checkpoint_id, retain=1)
        kept.append(subtask)
        # the one retained checkpoint restores, though its chain lives in older directories
        assert storage.complete_checkpoints() == [checkpoint_id]
        verify_checkpoint(storage, storage.load_manifest(checkpoint_id))
    # directories no chain references any more are gone
    live = {h.path.split("/")[0] for h in storage.load_manifest(8).files()}
    assert set(CheckpointStorage.checkpoint_dir_name(c) for c in storage.checkpoint_ids()) == live


def test_a_manifest_referencing_a_removed_file_is_refused(tmp_path):
    from epochal.errors import CheckpointError

    storage = CheckpointStorage(str(tmp_path))
    backend = _backend("memory")
    state = ValueState(backend, "v")
    for key in "acdefg":
        backend.set_current_key(key)
        state.update(1)
    _checkpoint(storage, backend, 1)
    backend.set_current_key("b")
    state.update(2)
    storage.discard(1)  # as if retention had raced the notification
    snap = OperatorSnapshot(keyed=backend.snapshot(2))
    states, _ = write_task_snapshot(storage, 2, TaskId(0, 0), ALL, [("op", snap)])
    with pytest.raises(CheckpointError, match="retention removed"):
        storage.write_manifest(Manifest(2, "j", 0.0, 0.0, (OperatorState("op", 1, 16, (states[0].state,)),)))


class _Box:
    """A value that can be watched for being freed (ints cannot be weakly referenced)."""

    def __init__(self, n: int) -> None:
        self.n = n


def test_a_written_heap_snapshot_frees_the_old_values_before_its_checkpoint_completes(tmp_path):
    """Old values only the frozen maps hold go as soon as the writer is reported done.

    The writer only reads the snapshot; the task, which may still hold it, reports the write on
    its own thread, and the backend drops the frozen maps then, long before the checkpoint
    completes: holding the old values that long kept every write after the snapshot from
    reusing their memory.
    """
    storage = CheckpointStorage(str(tmp_path))
    backend = _backend("heap")
    backend.set_current_key("k")
    backend.put("v", _Box(1))
    snap = OperatorSnapshot(keyed=backend.snapshot(1))
    old = weakref.ref(backend.get("v"))
    backend.put("v", _Box(2))  # now only the frozen map holds the old value
    states, _ = write_task_snapshot(storage, 1, TaskId(0, 0), ALL, [("op", snap)])
    gc.collect()
    assert old() is not None  # the writer released nothing
    backend.on_snapshot_written(1, states[0].state.keyed_chain())
    gc.collect()
    assert old() is None  # though `snap` is still held
    assert 1 in backend.tracker._pending  # and the checkpoint is not complete


def _attributes(obj) -> dict:
    """Every attribute of `obj` by name, as (identity, value)."""
    names = [f.name for f in dataclasses.fields(obj)] if dataclasses.is_dataclass(obj) else list(vars(obj))
    return {name: (id(getattr(obj, name)), getattr(obj, name)) for name in names}


def _fill(backend, keys, value):
    state = ValueState(backend, "v")
    for key in keys:
        backend.set_current_key(key)
        state.update(value)


@pytest.mark.parametrize("kind", ["memory", "disk"])
def test_the_written_chain_reaches_the_tracker_only_through_on_snapshot_written(tmp_path, kind):
    storage = CheckpointStorage(str(tmp_path))
    backend = _backend(kind)
    _fill(backend, range(100), 0)
    keyed = backend.snapshot(1)
    before = _attributes(keyed)
    states, _ = write_task_snapshot(storage, 1, TaskId(0, 0), ALL, [("op", OperatorSnapshot(keyed=keyed))])
    assert _attributes(keyed) == before  # the writer only read the snapshot
    storage.write_manifest(Manifest(1, "j", 0.0, 0.0, (OperatorState("op", 1, 16, (states[0].state,)),)))
    backend.notify_checkpoint_complete(1)  # complete, but never reported written: no base
    _fill(backend, [1], 1)
    subtask, _ = _checkpoint(storage, backend, 2)
    assert len(subtask.keyed_chain()) == 1  # full
    _fill(backend, [2], 2)
    subtask, _ = _checkpoint(storage, backend, 3)
    assert len(subtask.keyed_chain()) == 2  # a delta over checkpoint 2, reported written
    _fill(backend, [3], 3)
    _checkpoint(storage, backend, 4, report_written=False)
    _fill(backend, [4], 4)
    subtask, _ = _checkpoint(storage, backend, 5)
    assert len(subtask.keyed_chain()) == 1  # 4 completed unreported: 3 is no base any more
    assert _model_state(storage, subtask) == {("v", k): {1: 1, 2: 2, 3: 3, 4: 4}.get(k, 0) for k in range(100)}
    backend.close()


def test_a_heap_snapshot_is_released_for_in_place_batch_writes_only_after_on_snapshot_written(tmp_path):
    storage = CheckpointStorage(str(tmp_path))
    backend = _backend("memory")
    group = [key_group_of("k", 16)]
    backend.reduce_into([], "r", [[1]], ["k"], group, lambda acc, r: acc + r)
    snap = OperatorSnapshot(keyed=backend.snapshot(1))
    states, _ = write_task_snapshot(storage, 1, TaskId(0, 0), ALL, [("op", snap)])
    assert backend.snapshot_readers()  # written, but not reported: still guarded
    live = backend.maps.states["r"][group[0]].data
    backend.reduce_into([], "r", [[2]], ["k"], group, lambda acc, r: acc + r)
    assert backend.maps.states["r"][group[0]].data is not live  # copied on write
    backend.on_snapshot_written(1, states[0].state.keyed_chain())
    assert not backend.snapshot_readers() and snap.keyed.released
    snap2 = OperatorSnapshot(keyed=backend.snapshot(2))
    backend.on_snapshot_written(2, None)
    live = backend.maps.states["r"][group[0]].data
    backend.reduce_into([], "r", [[3]], ["k"], group, lambda acc, r: acc + r)
    assert backend.maps.states["r"][group[0]].data is live  # in place
    assert snap2.keyed.released


def test_a_disk_snapshot_leaves_no_checkpoint_behind(tmp_path):
    """A full disk snapshot is a RocksDB checkpoint on disk: removed when reported written, or
    when nothing holds the snapshot any more (a write that failed and was never reported)."""
    storage = CheckpointStorage(str(tmp_path / "ckpt"))
    backend = DiskKeyedStateBackend(ALL, 16, local_dir=str(tmp_path / "work"))
    _fill(backend, range(10), 0)

    def snapshot_dirs():
        return sorted(p.name for p in (tmp_path / "work").glob("*/snapshot-*"))

    keyed = backend.snapshot(1)
    assert snapshot_dirs() == ["snapshot-1"]
    states, _ = write_task_snapshot(storage, 1, TaskId(0, 0), ALL, [("op", OperatorSnapshot(keyed=keyed))])
    assert snapshot_dirs() == ["snapshot-1"]  # the writer only read it
    backend.on_snapshot_written(1, states[0].state.keyed_chain())
    assert snapshot_dirs() == []
    backend.snapshot(None)  # dropped at once
    gc.collect()
    assert snapshot_dirs() == []
    backend.close()
