"""Small heap snapshots are serialised in the synchronous part and released at once."""

from __future__ import annotations

import pytest

from epochal import CheckpointConfig, StateConfig, StreamEnvironment
from epochal.cluster.inprocess import InProcessExecutor
from epochal.plan.job_graph import TaskId
from epochal.runtime.operators import OperatorSnapshot
from epochal.runtime.task.snapshots import read_keyed_chain, serialise_small_snapshots, write_task_snapshot
from epochal.state.handles import ValueState
from epochal.state.heap import HeapKeyedStateBackend
from epochal.state.keygroups import KeyGroupRange
from epochal.state.sections import SectionCopy
from epochal.state.snapshot_files import KeyedFile
from epochal.state.storage import CheckpointStorage
from epochal.testing import CollectSink, Crash, ListSource

ALL = KeyGroupRange(0, 16)


def _backend(values: dict) -> HeapKeyedStateBackend:
    backend = HeapKeyedStateBackend(ALL, 16)
    state = ValueState(backend, "v")
    for key, value in values.items():
        backend.set_current_key(key)
        state.update(value)
    return backend


def _write(storage: CheckpointStorage, checkpoint_id: int, snap: OperatorSnapshot):
    states, _ = write_task_snapshot(storage, checkpoint_id, TaskId(0, 0), ALL, [("op", snap)])
    return states[0].state


def test_a_small_snapshot_is_released_at_once_and_writes_the_same_file(tmp_path) -> None:
    storage = CheckpointStorage(str(tmp_path))
    values = {k: ("v", k) for k in range(50)}
    later = OperatorSnapshot(keyed=_backend(values).snapshot(1))
    early = OperatorSnapshot(keyed=_backend(values).snapshot(1))
    serialise_small_snapshots([("op", early)], max_entries=50)
    assert early.keyed.released and early.keyed.groups == {}
    serialise_small_snapshots([("op", later)], max_entries=49)  # one entry too many: untouched
    assert not later.keyed.released and later.keyed.encoded is None

    written_early, written_later = _write(storage, 1, early), _write(storage, 2, later)
    assert written_early.keyed.sha256 == written_later.keyed.sha256
    groups = read_keyed_chain(storage, written_early.keyed_chain())
    assert {k: v for states in groups.values() for k, v in states["v"].items()} == values


def test_writes_after_an_early_serialisation_go_in_place_and_stay_out_of_it(tmp_path) -> None:
    storage = CheckpointStorage(str(tmp_path))
    backend = _backend({"a": 1, "b": 2})
    snap = OperatorSnapshot(keyed=backend.snapshot(1))
    serialise_small_snapshots([("op", snap)], max_entries=100)
    assert not backend.snapshot_readers()  # nothing reads the live maps: no copy-on-write
    backend.set_current_key("a")
    ValueState(backend, "v").update(99)
    groups = read_keyed_chain(storage, _write(storage, 1, snap).keyed_chain())
    assert {k: v for states in groups.values() for k, v in states["v"].items()} == {"a": 1, "b": 2}


def test_a_snapshot_that_cannot_be_serialised_is_left_for_the_writer_to_report(tmp_path) -> None:
    storage = CheckpointStorage(str(tmp_path))
    snap = OperatorSnapshot(keyed=_backend({"a": lambda: None}).snapshot(1))  # not picklable
    serialise_small_snapshots([("op", snap)], max_entries=100)
    assert not snap.keyed.released and snap.keyed.encoded is None
    with pytest.raises(Exception, match="lambda"):
        _write(storage, 1, snap)


@pytest.mark.parametrize("inline", [0, 20_000])
def test_exactly_once_across_a_crash_whichever_part_serialises(tmp_path, inline: int) -> None:
    words = [f"w{i % 13}" for i in range(4000)]
    collected = CollectSink()
    env = StreamEnvironment(
        parallelism=2, executor="inprocess", batch_size=16, state=StateConfig(inline_snapshot_entries=inline),
        checkpoint=CheckpointConfig(interval=0.01, directory=str(tmp_path / "ckpt")),
    )
    env.from_source(ListSource(words[:2500] + [Crash()] + words[2500:], splits=2)).key_by(
        lambda w: w
    ).count().sink_to(collected)
    result = InProcessExecutor(seed=3, virtual_time=True).execute(env.job_graph("count"))
    assert result.restarts == 1 and result.restored_from[-1] is not None
    finals: dict[str, int] = {}
    for word, n in collected.committed():
        assert n == finals.get(word, 0) + 1  # every update exactly once, in order
        finals[word] = n
    assert finals == {f"w{i}": words.count(f"w{i}") for i in range(13)}


def test_a_negative_limit_is_refused() -> None:
    with pytest.raises(ValueError, match="inline_snapshot_entries"):
        StateConfig(inline_snapshot_entries=-1)



def test_a_small_delta_of_a_large_state_is_pickled_at_once_its_copies_left_as_bytes(tmp_path) -> None:
    storage = CheckpointStorage(str(tmp_path))
    backend = _backend({k: ["v", k] for k in range(500)})  # mutable values: copy-on-write guards them
    full = OperatorSnapshot(keyed=backend.snapshot(1))
    base = _write(storage, 1, full)
    backend.on_snapshot_written(1, base.keyed_chain())
    backend.notify_checkpoint_complete(1)
    moved_in = SectionCopy(False, KeyedFile(storage.read_file(base.keyed)).raw(3))
    backend.reassign(KeyGroupRange(0, 16), {}, {})  # nothing gained: the group below is replaced
    backend._resets[3] = (moved_in,)  # noqa: SLF001 - as a migration's adoption leaves it
    backend.set_current_key(7)
    ValueState(backend, "v").update(["changed"])
    twin = OperatorSnapshot(keyed=backend.snapshot(2))
    assert twin.keyed.is_delta and twin.keyed.entries == 1  # of 500: the delta pickles one
    serialise_small_snapshots([("op", twin)], max_entries=10)
    assert twin.keyed.released and not backend.snapshot_readers()  # no map waits for the writer
    reset = dict(twin.keyed.encoded)[3]
    assert reset.copies[0] is moved_in  # the copy stays the bytes it was, for the writer
    backend.get_mutable("v", list).append("after the barrier")  # in place: the delta was pickled before
    written = _write(storage, 2, twin)
    groups = read_keyed_chain(storage, written.keyed_chain())
    values = {k: v for states in groups.values() for k, v in states["v"].items()}
    assert values == {**{k: ["v", k] for k in range(500)}, 7: ["changed"]}
