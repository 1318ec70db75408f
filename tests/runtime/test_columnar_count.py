"""The columnar count keeps counts in numpy and writes them back into the keyed-state backend.

The backend stays the state of record: what a snapshot, a restore, a rescale or the state reader
sees must be the exact counts, whatever mix of Arrow batches and records came before.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import pyarrow as pa
import pytest

from epochal import CheckpointConfig, RestartStrategy, StreamEnvironment
from epochal.runtime.operators.columnar_count import ColumnarCounts
from epochal.state.heap import HeapKeyedStateBackend
from epochal.state.keygroups import KeyGroupRange, key_group_of, key_group_range
from epochal.state.reader import read_state
from epochal.testing import CollectSink, Crash, ListSource
from expectations import running_counts

MAX_P = 128
ALL_GROUPS = KeyGroupRange(0, MAX_P)


def _backend(owned: KeyGroupRange = ALL_GROUPS) -> HeapKeyedStateBackend:
    return HeapKeyedStateBackend(owned, MAX_P)


def _stored(backend: HeapKeyedStateBackend) -> dict:
    snap = backend.snapshot()
    return {k: v for states in snap.groups.values() for k, v in states.get("count", {}).items()}


def test_counts_reach_the_backend_only_when_flushed_and_then_exactly():
    backend = _backend()
    table = ColumnarCounts(pa.string(), backend, "count")
    before = table.add(pa.array(["a", "b"]), np.array([2, 1]))
    assert before.tolist() == [0, 0]
    before = table.add(pa.array(["b", "c", "a"]), np.array([4, 1, 1]))
    assert before.tolist() == [1, 0, 2]
    assert _stored(backend) == {}  # a write-back cache: nothing written yet
    table.flush()
    assert _stored(backend) == {"a": 3, "b": 5, "c": 1}
    # the incremental tracker sees every flushed key as changed, in its own key group
    changed = {k: g for g in range(MAX_P) for k in backend.changed_keys("count", g)}
    assert changed == {k: key_group_of(k, MAX_P) for k in "abc"}


def test_only_changed_counts_are_written_again():
    backend = _backend()
    table = ColumnarCounts(pa.string(), backend, "count")
    table.add(pa.array(["a", "b"]), np.array([1, 1]))
    table.flush()
    backend.snapshot(1)  # takes the changed sets along
    table.add(pa.array(["b"]), np.array([1]))
    table.flush()
    changed = {k for g in range(MAX_P) for k in backend.changed_keys("count", g)}
    assert changed == {"b"} and _stored(backend) == {"a": 1, "b": 2}


def test_a_key_new_to_the_table_starts_from_the_restored_count():
    backend = _backend()
    backend.restore({key_group_of("a", MAX_P): {"count": {"a": 41}}, key_group_of(7, MAX_P): {"count": {7: 2}}})
    strings = ColumnarCounts(pa.string(), backend, "count")
    assert strings.add(pa.array(["a", "z"]), np.array([1, 1])).tolist() == [41, 0]
    ints = ColumnarCounts(pa.int32(), backend, "count")
    assert ints.add(pa.array([7], pa.int32()), np.array([3])).tolist() == [2]


def test_a_key_of_another_subtask_is_refused_not_counted():
    owned = key_group_range(0, 2, MAX_P)
    foreign = next(f"k{i}" for i in range(1000) if key_group_of(f"k{i}", MAX_P) not in owned)
    table = ColumnarCounts(pa.string(), _backend(owned), "count")
    with pytest.raises(RuntimeError, match="routed to the wrong subtask"):
        table.add(pa.array([foreign]), np.array([1]))


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
