"""A local aggregation's partials carry their keys' hashes (issue 36): the key exchange and the
global phase find the keys by them instead of hashing again, and fall back to grouping and
hashing when a batch repeats a key (the input joins batches of several shipments)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from epochal.plan.aggregates import AggregateCall, AggregateKind, LocalAggregateSpec
from epochal.plan.specs import Partitioning, PartitionKind
from epochal.runtime.key_index import KEY_HASH_COLUMN, KeyIndex, carried_hashes, hash_keys
from epochal.runtime.operators.aggregates.local import FROM_RECORDS, LocalAggregateOperator
from epochal.runtime.task.partition import Partitioner
from epochal.runtime.wire.batches import to_records
from epochal.state.keygroups import key_group_of, subtask_of_key_group

COUNT = AggregateCall(AggregateKind.COUNT, None, None, "count")


def partials(words: list[str | None], **spec: object) -> pa.RecordBatch:
    """What a local count ships for one batch of `words`."""
    local = LocalAggregateOperator(LocalAggregateSpec("count-local", "count-local", "word", (COUNT,), **spec))
    local.process(pa.RecordBatch.from_arrays([pa.array(words, pa.string())], names=["word"]))
    shipped = local.end_input()
    assert isinstance(shipped, pa.RecordBatch)
    return shipped


words_lists = st.lists(st.one_of(st.none(), st.text(max_size=5)), min_size=1, max_size=60)


@given(words_lists)
@settings(max_examples=100, deadline=None)
def test_the_local_phase_ships_exact_counts_with_the_hashes_a_key_index_files_them_under(
    words: list[str | None],
) -> None:
    shipped = partials(words)
    counts = dict(zip(shipped.column("word").to_pylist(), shipped.column("count").to_pylist()))
    assert counts == {w: words.count(w) for w in set(words)}
    hashes = carried_hashes(shipped)
    assert hashes is not None  # one shipment: distinct keys
    assert np.array_equal(hashes, hash_keys(shipped.column("word")))
    with_hashes, without = KeyIndex(pa.string(), 128), KeyIndex(pa.string(), 128)
    slots_a, _ = with_hashes.lookup(shipped.column("word"), hashes)
    slots_b, _ = without.lookup(shipped.column("word"))
    assert np.array_equal(slots_a, slots_b)
    assert np.array_equal(with_hashes.key_groups[slots_a], without.key_groups[slots_b])


def test_a_batch_joined_from_two_shipments_repeats_keys_and_carries_no_usable_hashes() -> None:
    a, b = partials(["x", "y", "x"]), partials(["y", "z"])
    joined = pa.Table.from_batches([a, b]).combine_chunks().to_batches()[0]
    assert carried_hashes(a) is not None and carried_hashes(joined) is None
    assert carried_hashes(pa.RecordBatch.from_arrays([pa.array(["x"])], names=["word"])) is None


@given(words_lists, words_lists, st.integers(2, 5))
@settings(max_examples=100, deadline=None)
def test_partials_route_to_the_owner_of_each_key_group_with_or_without_repeats(
    first: list[str | None], second: list[str | None], n: int
) -> None:
    a, b = partials(first), partials(second)
    joined = pa.Table.from_batches([a, b]).combine_chunks().to_batches()[0]
    for batch in (a, b, joined):
        router = Partitioner(Partitioning(PartitionKind.KEY_GROUP, "word"), n, 0, 128, "count")
        for target, piece in router.split(batch):
            assert isinstance(piece, pa.RecordBatch) and KEY_HASH_COLUMN in piece.schema.names
            for row in to_records(piece):
                assert subtask_of_key_group(key_group_of(row[0], 128), n, 128) == target
        assert sum(p.num_rows for _, p in router.split(batch)) == batch.num_rows


def counts_of_records(keys: list[object]) -> object:
    """What a local count of records keyed by themselves ships at a barrier."""
    local = LocalAggregateOperator(LocalAggregateSpec("count-local", "count-local", _itself, (COUNT,)))
    local.process(list(keys))
    return local.pre_barrier(1)


def _itself(record: object) -> object:
    return record


def test_counts_of_records_go_as_a_batch_with_hashes_marked_as_from_records() -> None:
    shipped = counts_of_records(["a", "b", "a", None])
    assert isinstance(shipped, pa.RecordBatch) and shipped.schema.metadata == FROM_RECORDS
    assert dict(zip(shipped.column("key").to_pylist(), shipped.column("count").to_pylist())) == {
        "a": 2, "b": 1, None: 1}
    assert carried_hashes(shipped) is not None


def test_keys_no_key_index_takes_go_as_tuples() -> None:
    for keys in ([1, "a", 1], [1.5, 2.5, 1.5], [(1, 2), (1, 2)], [True, False]):
        shipped = counts_of_records(keys)
        assert isinstance(shipped, list)
        assert dict(shipped) == {k: keys.count(k) for k in set(keys)}
