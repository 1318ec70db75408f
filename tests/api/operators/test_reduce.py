"""`KeyedStream.reduce`: a rolling reduce per key."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

from epochal.testing import CollectSink, ListSource

if TYPE_CHECKING:
    from api.conftest import MakeEnv


def _by_key(records: list[Any]) -> dict[Any, list[Any]]:
    """Records grouped by their first field, in order."""
    out: dict[Any, list[Any]] = {}
    for r in records:
        out.setdefault(r[0], []).append(r)
    return out


def test_rolling_reduce_emits_every_intermediate_value(make_env: MakeEnv) -> None:
    env = make_env(parallelism=1)
    sink = CollectSink()
    items = [("a", 1), ("b", 10), ("a", 2), ("a", 3), ("b", 20)]
    keyed = env.from_source(ListSource(items)).key_by(lambda r: r[0])
    keyed.reduce(lambda acc, r: (acc[0], acc[1] + r[1])).sink_to(sink)
    env.execute("reduce")
    assert sink.committed() == [("a", 1), ("b", 10), ("a", 3), ("a", 6), ("b", 30)]


def test_the_first_record_of_a_key_passes_unchanged(make_env: MakeEnv) -> None:
    calls: list[tuple[int, int]] = []

    def fn(acc: int, record: int) -> int:
        calls.append((acc, record))
        return acc + record

    env = make_env(parallelism=1)
    sink = CollectSink()
    env.from_source(ListSource([5, 7, 9])).key_by(lambda x: x % 2).reduce(fn).sink_to(sink)
    env.execute("reduce-first")
    assert sink.committed() == [5, 12, 21]
    assert calls == [(5, 7), (12, 9)]


@pytest.mark.parametrize("parallelism", [1, 2, 3])
def test_reduce_keeps_state_per_key_in_parallel(make_env: MakeEnv, parallelism: int) -> None:
    items = [(f"k{i % 5}", i) for i in range(60)]
    env = make_env(parallelism=parallelism)
    sink = CollectSink()
    (
        env.from_source(ListSource(items, splits=1, batch_size=4))
        .key_by(lambda r: r[0])
        .reduce(lambda acc, r: (acc[0], acc[1] + r[1]))
        .sink_to(sink)
    )
    env.execute("reduce-parallel")
    # One source split keeps records in order, and a key's records all go to one subtask.
    got = _by_key(sink.committed())
    expected: dict[Any, list[Any]] = {}
    for key, records in _by_key(items).items():
        total = 0
        running: list[tuple[Any, int]] = []
        for _, v in records:
            total += v
            running.append((key, total))
        expected[key] = running
    assert got == expected


def test_reduce_keyed_by_dict_field_name(make_env: MakeEnv) -> None:
    env = make_env(parallelism=2)
    sink = CollectSink()
    items = [{"user": u, "n": 1} for u in "abacab"]
    (
        env.from_source(ListSource(items))
        .key_by("user")
        .reduce(lambda acc, r: {"user": acc["user"], "n": acc["n"] + r["n"]})
        .sink_to(sink)
    )
    env.execute("reduce-field")
    finals: dict[str, int] = {}
    for r in sink.committed():
        finals[r["user"]] = max(finals.get(r["user"], 0), r["n"])
    assert finals == {"a": 3, "b": 2, "c": 1}


def test_reduce_over_arrow_rows_keyed_by_function(make_env: MakeEnv) -> None:
    env = make_env(parallelism=2)
    sink = CollectSink()
    (
        env.from_source(ListSource([("x", 1), ("y", 2), ("x", 3)]))
        .map_batches(lambda b: b)
        .key_by(lambda row: row[0])
        .reduce(lambda acc, r: (acc[0], acc[1] + r[1]))
        .sink_to(sink)
    )
    env.execute("reduce-arrow")
    assert sorted(sink.committed()) == [("x", 1), ("x", 4), ("y", 2)]


def test_reduce_keyed_by_arrow_column_name(make_env: MakeEnv) -> None:
    env = make_env(parallelism=2)
    sink = CollectSink()
    (
        env.from_source(ListSource([("x", 1), ("y", 2), ("x", 3)]))
        .map_batches(lambda b: b.rename_columns(["k", "v"]))
        .key_by("k")
        .reduce(lambda acc, r: (acc[0], acc[1] + r[1]))
        .sink_to(sink)
    )
    env.execute("reduce-arrow-column")
    assert sorted(sink.committed()) == [("x", 1), ("x", 4), ("y", 2)]
