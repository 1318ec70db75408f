"""The columnar count keeps counts in a numpy table, written into keyed state per key group.

Keyed state stays the state of record: what a snapshot, a restore, a rescale or the state reader
sees must be the exact counts, whatever mix of Arrow batches and records came before.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import pyarrow as pa
import pytest

from epochal import CheckpointConfig, RestartStrategy, StreamEnvironment
from epochal.plan.aggregates import AggregateCall, AggregateKind
from epochal.runtime.operators.aggregates.functions import batch_aggregate
from epochal.runtime.operators.aggregates.table_state import TableState
from epochal.state.group_tables import GROUP_TABLE_STATE
from epochal.state.heap import HeapKeyedStateBackend
from epochal.state.keygroups import KeyGroupRange, key_group_of, key_group_range
from epochal.state.reader import read_state
from epochal.testing import CollectSink, Crash, ListSource
from expectations import running_counts

MAX_P = 128
ALL_GROUPS = KeyGroupRange(0, MAX_P)
COUNT = AggregateCall(AggregateKind.COUNT)


def _backend(owned: KeyGroupRange = ALL_GROUPS) -> HeapKeyedStateBackend:
    return HeapKeyedStateBackend(owned, MAX_P)


def _tables(backend: HeapKeyedStateBackend) -> TableState:
    return TableState(backend, [batch_aggregate(COUNT)], ["count"], track_unemitted=False)


def _add(tables: TableState, keys: pa.Array, increments: list[int]) -> list[int]:
    """Add counts the way the operator does; returns the counts before (0 where absent)."""
    table = tables.ensure(keys.type)
    slots, added = table.slots(keys)
    if added.any():
        tables.new_keys(table, slots[added])
    before = np.where(table.present(slots), table.gather(slots)[0]["count"], 0)
    table.merge(slots, [{"count": np.array(increments)}])
    return before.tolist()


def _stored(backend: HeapKeyedStateBackend) -> dict:
    snap = backend.snapshot()
    out = {}
    for states in snap.groups.values():
        for key, value in states.get("count", {}).items():
            out[key] = value
        for entry in states.get(GROUP_TABLE_STATE, {}).values():
            out.update((k, v) for k, _, v in entry.rows())
    return out


def test_counts_reach_the_backend_only_when_flushed_and_then_exactly():
    backend = _backend()
    tables = _tables(backend)
    assert _add(tables, pa.array(["a", "b"]), [2, 1]) == [0, 0]
    assert _add(tables, pa.array(["b", "c", "a"]), [4, 1, 1]) == [1, 0, 2]
    assert _stored(backend) == {}  # working state: nothing written yet
    tables.flush()
    assert _stored(backend) == {"a": 3, "b": 5, "c": 1}
    # one entry per key group, in the group each key belongs to, each marked changed
    changed = {g for g in range(MAX_P) if backend.changed_keys(GROUP_TABLE_STATE, g)}
    assert changed == {key_group_of(k, MAX_P) for k in "abc"}


def test_only_changed_key_groups_are_written_again():
    backend = _backend()
    tables = _tables(backend)
    _add(tables, pa.array(["a", "b"]), [1, 1])
    tables.flush()
    backend.snapshot(1)  # takes the changed sets along
    _add(tables, pa.array(["b"]), [1])
    tables.flush()
    changed = {g for g in range(MAX_P) if backend.changed_keys(GROUP_TABLE_STATE, g)}
    assert changed == {key_group_of("b", MAX_P)} and _stored(backend) == {"a": 1, "b": 2}


def test_a_key_new_to_the_table_takes_its_count_from_the_per_key_state():
    backend = _backend()
    backend.restore({key_group_of("a", MAX_P): {"count": {"a": 41}}, key_group_of(7, MAX_P): {"count": {7: 2}}})
    strings = _tables(backend)
    assert _add(strings, pa.array(["a", "z"]), [1, 1]) == [41, 0]
    strings.flush()
    assert _stored(backend) == {"a": 42, "z": 1, 7: 2}  # "a" moved into the table, 7 stays per key
    ints = _tables(backend)
    assert _add(ints, pa.array([7], pa.int32()), [3]) == [2]


def test_a_table_reloads_from_keyed_state_and_dissolves_into_per_key_entries():
    backend = _backend()
    tables = _tables(backend)
    _add(tables, pa.array(["a", "b"]), [4, 2])
    tables.flush()
    again = _tables(backend)
    again.reload()
    assert again.query("a") == {"count": 4} and again.query("b") == {"count": 2} and again.query("q") == {}
    again.dissolve()
    assert again.table is None and _stored(backend) == {"a": 4, "b": 2}
    assert not any(states.get(GROUP_TABLE_STATE) for states in backend.snapshot().groups.values())


def test_a_key_of_another_subtask_is_refused_not_counted():
    owned = key_group_range(0, 2, MAX_P)
    foreign = next(f"k{i}" for i in range(1000) if key_group_of(f"k{i}", MAX_P) not in owned)
    tables = _tables(_backend(owned))
    with pytest.raises(RuntimeError, match="routed to the wrong subtask"):
        _add(tables, pa.array([foreign]), [1])


def _env(tmp_path, parallelism=2, backend="memory", batch_size=5):
    return StreamEnvironment(
        parallelism=parallelism,
        checkpoint=CheckpointConfig(interval=0.001, directory=str(tmp_path / "ckpt")),
        executor="inprocess",
        restart=RestartStrategy(max_restarts=3),
        state_backend=backend,
        batch_size=batch_size,
    )


@pytest.mark.parametrize("backend", ["memory", "disk"])
def test_columnar_counts_survive_a_crash_exactly_once(tmp_path, backend):
    keys = [f"w{(i * 31) % 17}" for i in range(400)]
    items = [{"k": k} for k in keys]
    sink = CollectSink()
    env = _env(tmp_path, backend=backend)
    (env.from_source(ListSource([*items[:250], Crash(), *items[250:]], splits=3))
        .map_batches(lambda b: b).key_by("k").count().uid("counts").sink_to(sink))
    result = env.execute("columnar-crash")
    assert result.restarts == 1
    assert sorted(map(tuple, sink.committed()), key=repr) == running_counts(keys)
    assert {r.key: r.value for r in read_state(str(tmp_path / "ckpt"), "counts")} == dict(Counter(keys))


def test_records_between_arrow_batches_see_and_leave_the_same_counts(tmp_path):
    """A count fed Arrow batches and record lists alike: the table hands over to the backend."""
    keys = [f"k{i % 5}" for i in range(60)]

    def alternate(batch):  # every other batch leaves as Python records
        alternate.n = getattr(alternate, "n", 0) + 1
        return batch if alternate.n % 2 else batch.to_pylist()

    sink = CollectSink()
    env = _env(tmp_path, parallelism=1, batch_size=4)
    (env.from_source(ListSource([{"k": k} for k in keys]))
        .map_batches(alternate).key_by("k").count().uid("counts").sink_to(sink))
    env.execute("mixed")
    got = sorted((r["k"], r["count"]) if isinstance(r, dict) else tuple(r) for r in sink.committed())
    assert got == sorted(running_counts(keys))


def test_state_from_columnar_counts_rescales(tmp_path):
    directory = str(tmp_path / "ckpt")
    counts: Counter = Counter()
    for run, parallelism in enumerate([2, 3, 1], start=1):
        keys = [f"key-{(i * 7 + run) % 40}" for i in range(300)]
        counts.update(keys)
        env = StreamEnvironment(
            parallelism=parallelism,
            checkpoint=CheckpointConfig(interval=0.002, directory=directory, retain=2),
            executor="inprocess",
            restart=RestartStrategy.none(),
            batch_size=7,
        )
        (env.from_source(ListSource([{"k": k} for k in keys], splits=3), name=f"batch-{run}")
            .map_batches(lambda b: b).key_by("k").count().uid("counts").sink_to(CollectSink(), name=f"out-{run}"))
        env.execute(f"run-{run}", from_checkpoint=None if run == 1 else "latest", allow_non_restored_state=True)
        assert {r.key: r.value for r in read_state(directory, "counts")} == dict(counts), f"run {run}"
