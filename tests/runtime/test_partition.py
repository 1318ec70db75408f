"""Tests of `epochal.runtime.task.partition`: how a task's output batches reach downstream channels."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from epochal.errors import KeySelectorError
from epochal.plan.specs import BROADCAST, FORWARD, REBALANCE, Partitioning, PartitionKind
from epochal.runtime.task.partition import Partitioner
from epochal.runtime.wire.batches import batch_len, columns_of, to_arrow, to_records
from epochal.runtime.wire.elements import Batch
from epochal.state.keygroups import key_group_of, subtask_of_key_group


def key_group_partitioner(key: Any, n: int, m: int = 128, subtask: int = 0) -> Partitioner:
    return Partitioner(Partitioning(PartitionKind.KEY_GROUP, key), n, subtask, m, "count")


def routed(pieces: Iterable[tuple[int, Batch]]) -> dict[int, list[Any]]:
    out: dict[int, list[Any]] = {}
    for target, batch in pieces:
        assert target not in out, "one piece per target and batch"
        out[target] = to_records(batch)
    return out


keys = st.one_of(
    st.text(max_size=6), st.integers(-1000, 1000), st.booleans(), st.none(),
    st.tuples(st.text(max_size=2), st.integers(0, 9)),
)
channels_and_max = st.integers(1, 64).flatmap(lambda m: st.tuples(st.integers(1, m), st.just(m)))


@given(st.lists(keys, min_size=1, max_size=40), channels_and_max)
@settings(max_examples=200)
def test_key_group_routing_sends_each_record_to_the_owner_of_its_key_group(
    key_list: list[Any], nm: tuple[int, int]
) -> None:
    n, m = nm
    records = [{"k": k, "i": i} for i, k in enumerate(key_list)]
    for selector in ("k", lambda r: r["k"]):
        out = routed(key_group_partitioner(selector, n, m).split(records))
        expected: dict[int, list[Any]] = {}
        for r in records:
            expected.setdefault(subtask_of_key_group(key_group_of(r["k"], m), n, m), []).append(r)
        assert out == expected  # right target, nothing lost or repeated, order kept per target


@st.composite
def arrow_compatible_records(draw: st.DrawFn) -> list[dict[str, Any]]:
    kind = draw(st.sampled_from(["int", "str", "float", "bool"]))
    values = {
        "int": st.integers(-(2**40), 2**40),
        "str": st.text(max_size=6),
        "float": st.floats(allow_nan=False, allow_infinity=False, width=64),
        "bool": st.booleans(),
    }[kind]
    key_list = draw(st.lists(values, min_size=1, max_size=40))
    return [{"k": k, "i": i} for i, k in enumerate(key_list)]


@given(arrow_compatible_records(), channels_and_max)
@settings(max_examples=200, deadline=None)  # the first example pays pyarrow's import of pandas (0.6 s)
def test_arrow_and_list_paths_route_identically(records: list[dict[str, Any]], nm: tuple[int, int]) -> None:
    n, m = nm
    from_list = routed(key_group_partitioner("k", n, m).split(records))
    batch = pa.RecordBatch.from_pylist(records)
    from_arrow = routed(key_group_partitioner("k", n, m).split(batch))
    ids_list = {t: [r["i"] for r in rs] for t, rs in from_list.items()}
    ids_arrow = {t: [row[1] for row in rs] for t, rs in from_arrow.items()}  # rows are (k, i) tuples
    assert ids_arrow == ids_list


def test_arrow_pieces_are_record_batches_with_the_original_schema() -> None:
    batch = pa.RecordBatch.from_pydict({"k": ["a", "b", "c", "a", "d"], "v": [1, 2, 3, 4, 5]})
    pieces = list(key_group_partitioner("k", 3).split(batch))
    assert all(isinstance(b, pa.RecordBatch) and b.schema == batch.schema for _, b in pieces)
    assert sum(batch_len(b) for _, b in pieces) == 5
    targets = [t for t, _ in pieces]
    assert targets == sorted(set(targets))  # one piece per target, in target order
    rows = sorted(row for _, b in pieces for row in to_records(b))
    assert rows == sorted(zip(batch.column(0).to_pylist(), batch.column(1).to_pylist()))


def test_null_keys_route_the_same_on_both_paths() -> None:
    records = [{"k": None, "i": 0}, {"k": "a", "i": 1}, {"k": None, "i": 2}]
    from_list = routed(key_group_partitioner("k", 3).split(records))
    from_arrow = routed(key_group_partitioner("k", 3).split(pa.RecordBatch.from_pylist(records)))
    assert {t: [r[1] for r in rs] for t, rs in from_arrow.items()} == {
        t: [r["i"] for r in rs] for t, rs in from_list.items()
    }


def test_a_key_without_stable_hash_names_the_operator_and_record() -> None:
    p = key_group_partitioner(lambda r: r["k"], 4)
    with pytest.raises(KeySelectorError, match="count") as info:
        list(p.split([{"k": "ok"}, {"k": ["a", "list"]}]))
    assert info.value.record == {"k": ["a", "list"]}


def test_a_missing_arrow_column_raises_key_selector_error() -> None:
    batch = pa.RecordBatch.from_pydict({"v": [1, 2]})
    with pytest.raises(KeySelectorError, match="count"):
        list(key_group_partitioner("k", 4).split(batch))


# -- the other kinds --------------------------------------------------------------------------------
@pytest.mark.parametrize("subtask", [0, 1, 2, 5])
def test_rebalance_round_robins_whole_batches(subtask: int) -> None:
    p = Partitioner(REBALANCE, 3, subtask, 128, "t")
    batches = [[i] for i in range(7)]
    targets = []
    for b in batches:
        (piece,) = list(p.split(b))
        assert piece[1] is b  # the whole batch, uncut
        targets.append(piece[0])
    start = subtask % 3
    assert targets == [(start + i) % 3 for i in range(7)]


def test_rebalance_skips_empty_batches_without_advancing() -> None:
    p = Partitioner(REBALANCE, 2, 0, 128, "t")
    assert list(p.split([])) == []
    assert list(p.split(pa.RecordBatch.from_pydict({"v": pa.array([], pa.int64())}))) == []
    assert [t for t, _ in p.split([1])] == [0]
    assert [t for t, _ in p.split([2])] == [1]


def test_broadcast_copies_every_batch_to_all_channels() -> None:
    p = Partitioner(BROADCAST, 4, 2, 128, "t")
    batch = [1, 2, 3]
    pieces = list(p.split(batch))
    assert [t for t, _ in pieces] == [0, 1, 2, 3]
    assert all(b == batch for _, b in pieces)
    arrow = pa.RecordBatch.from_pydict({"v": [1]})
    assert [t for t, _ in p.split(arrow)] == [0, 1, 2, 3]


def test_forward_and_single_channel_edges_keep_the_batch_on_channel_zero() -> None:
    batch = [{"k": "a"}, {"k": "b"}]
    assert list(Partitioner(FORWARD, 1, 3, 128, "t").split(batch)) == [(0, batch)]
    assert list(key_group_partitioner("k", 1).split(batch)) == [(0, batch)]


def test_empty_batches_go_nowhere() -> None:
    for p in (key_group_partitioner("k", 3), Partitioner(BROADCAST, 3, 0, 128, "t")):
        assert list(p.split([])) == []


def test_columns_of_transposes_rows_as_zip_does() -> None:
    rows = [(f"w{i}", i, i / 2) for i in range(1000)]
    assert columns_of(rows, 3) == [list(c) for c in zip(*rows, strict=True)]
    assert columns_of([], 2) == [[], []]
    assert to_arrow(rows).column(2).to_pylist() == [i / 2 for i in range(1000)]
