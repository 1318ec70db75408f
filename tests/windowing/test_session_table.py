"""The columnar session table (`runtime.windowing.session_table`): merging, re-firing, slots
given up, its keyed-state form and a key's state query. Against the brute-force reference, with
random traces, restores and rescales: tests/windowing/test_slice_table.py (both tables).
"""

from __future__ import annotations

import math
import pickle

import numpy as np
import pyarrow as pa

from epochal.runtime.windowing import Count, Sum
from epochal.runtime.windowing.session_columns import SessionRows, union
from epochal.runtime.windowing.session_state import split_group_sessions
from epochal.runtime.windowing.session_table import SessionTable
from epochal.runtime.windowing.sessions import Sessions
from epochal.runtime.windowing.table_partials import Reduction
from epochal.state.keygroups import key_group_of


def _table(gaps: list[float], reduction: Reduction = Reduction.COUNT, lateness: float = 0.0) -> SessionTable:
    aggregate = Count() if reduction is Reduction.COUNT else Sum()
    return SessionTable(Sessions([f"s{g:g}" for g in gaps], gaps, aggregate, lateness), reduction)


def _add(table: SessionTable, rows: list[tuple[str, float]], watermark: float = -math.inf) -> None:
    table.add(pa.array([k for k, _ in rows]), np.array([t for _, t in rows]), None, watermark,
              lambda k: key_group_of(k, 128))


def _fired(table: SessionTable, watermark: float) -> list[tuple[str, float, float, int]]:
    fired = table.fire(watermark)
    if fired is None:
        return []
    return list(zip(fired.key_list(), fired.start.tolist(), fired.end.tolist(), fired.result.tolist()))


def test_a_record_between_two_sessions_merges_them_in_any_batch() -> None:
    table = _table([2.0])
    _add(table, [("a", 1.0), ("a", 6.0), ("b", 1.0)])
    _add(table, [("a", 4.0)])  # [4, 6) touches [1, 3) at 3 <= 4? no: 3 < 4 apart; it touches [6, 8)
    _add(table, [("a", 3.0)])  # [3, 5) touches [1, 3) and [4, 8): one session
    assert _fired(table, 100.0) == [("b", 1.0, 3.0, 1), ("a", 1.0, 8.0, 4)]
    assert len(table.lists) == 0  # freed: no acceptable record can touch them


def test_ends_that_touch_merge_and_gaps_just_over_do_not() -> None:
    rows = SessionRows(np.array([0, 0, 0]), np.array([0, 0, 0]), np.array([0.0, 2.0, 5.0]),
                       np.array([2.0, 4.5, 6.0]), np.array([1, 1, 1]), None, np.array([False, True, False]))
    merged = union(rows, 1, Reduction.COUNT)
    assert merged.start.tolist() == [0.0, 5.0] and merged.end.tolist() == [4.5, 6.0]
    assert merged.count.tolist() == [2, 1] and merged.changed.tolist() == [True, False]


def test_a_session_changed_after_it_fired_fires_again_as_a_new_window() -> None:
    table = _table([2.0], lateness=5.0)
    _add(table, [("a", 1.0)])
    assert _fired(table, 4.0) == [("a", 1.0, 3.0, 1)]
    _add(table, [("a", 2.5)], watermark=4.0)  # behind the watermark, within the lateness
    assert _fired(table, 4.5) == [("a", 1.0, 4.5, 2)]
    fired = table.fire(100.0)
    assert fired is None and len(table.lists) == 0


def test_export_splits_by_key_group_and_a_restored_table_fires_the_same() -> None:
    keys = [f"k{i}" for i in range(40)]
    table = _table([1.0, 3.0], Reduction.SUM)
    values = np.arange(80)
    ts = np.array([float(i % 7) for i in range(80)])
    group_of = lambda k: key_group_of(k, 8)  # noqa: E731
    table.add(pa.array(keys * 2), ts, values, -math.inf, group_of)
    entries = pickle.loads(pickle.dumps(table.export()))
    assert all(group_of(k) == g for g, e in entries.items() for k in e.keys)
    restored = _table([1.0, 3.0], Reduction.SUM)
    restored.load(entries.items())
    split = {g2: e2 for g, e in entries.items() for g2, e2 in split_group_sessions(g, e, g, 64).items()}
    resplit = _table([1.0, 3.0], Reduction.SUM)
    resplit.load(split.items())
    want = table.fire(math.inf)
    assert want is not None
    for other in (restored, resplit):
        got = other.fire(math.inf)
        assert got is not None
        assert sorted(zip(got.key_list(), got.query.tolist(), got.start.tolist(), got.result.tolist())) == sorted(
            zip(want.key_list(), want.query.tolist(), want.start.tolist(), want.result.tolist()))


def test_integer_sums_turn_to_floats_when_floats_come() -> None:
    table = _table([10.0], Reduction.SUM)
    group_of = lambda k: 0  # noqa: E731
    table.add(pa.array(["a", "a"]), np.array([1.0, 2.0]), np.array([4, -1]), -math.inf, group_of)
    table.add(pa.array(["a"]), np.array([3.0]), np.array([1.5]), -math.inf, group_of)
    fired = table.fire(math.inf)
    assert fired is not None and fired.result.tolist() == [4.5]


def test_keys_without_sessions_give_up_their_slots() -> None:
    table = _table([1.0])
    fired = []
    for step in range(40):
        _add(table, [(f"k{step}-{i}", float(step * 10)) for i in range(100)], watermark=float(step * 10 - 5))
        fired += _fired(table, float(step * 10 - 5))
        assert table.slots.n <= 1_200  # keys whose sessions were freed gave up their slots
    fired += _fired(table, math.inf)
    assert sorted(fired) == sorted((f"k{s}-{i}", s * 10.0, s * 10.0 + 1, 1) for s in range(40) for i in range(100))


def test_the_key_store_of_a_key_reads_like_the_per_key_path() -> None:
    table = _table([2.0])
    _add(table, [("a", 1.0), ("a", 2.0), ("a", 9.0)])
    store = table.key_store("a")
    assert store is not None and store.sessions[0].starts == [1.0, 9.0] and store.sessions[0].partials == [2, 1]
    assert table.key_store("b") is None
