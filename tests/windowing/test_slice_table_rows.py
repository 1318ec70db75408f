"""Slots of a `SliceTable` used again: keys that hold nothing are compacted away (as at every
checkpoint's export), the keys left move up, and new keys take the freed slots. A freed slot must
come back empty in every column a new key can use, the live ones and those purged earlier: a
cell left holding an old key's count would add it to the new key's windows."""

from __future__ import annotations

import math

import numpy as np
import pyarrow as pa
import pytest

from epochal.plan.windows import Sliding, Tumbling
from epochal.runtime.windowing import Count
from epochal.runtime.windowing.grid import Grid
from epochal.runtime.windowing.table import SliceTable
from epochal.runtime.windowing.table_partials import Reduction


def _table(window: object, reduction: Reduction) -> SliceTable:
    return SliceTable(Grid(["w"], [window], Count(), 0.0), reduction)  # type: ignore[list-item]


def _add(table: SliceTable, rows: list[tuple[str, float]], watermark: float) -> None:
    keys = [k for k, _ in rows]
    values = None if table.reduction is Reduction.COUNT else np.arange(1, len(rows) + 1)
    table.add(pa.array(keys), np.array([t for _, t in rows]), values, watermark, lambda key: 0)


def _results(table: SliceTable, watermark: float) -> list[tuple[str, float, int]]:
    fired = table.fire(watermark)
    return [] if fired is None else sorted(zip(fired.key_list(), fired.start.tolist(), fired.result.tolist()))


@pytest.mark.parametrize("reduction", [Reduction.COUNT, Reduction.SUM, Reduction.MAX])
@pytest.mark.parametrize("window,fired_at", [(Tumbling(2.0), 2.0), (Sliding(4.0, 2.0), 4.0)])
def test_keys_in_freed_slots_start_empty(window: object, fired_at: float, reduction: Reduction) -> None:
    table = _table(window, reduction)
    early = [(f"old{i}", 0.5) for i in range(6)]  # these keys hold nothing once their windows fired
    _add(table, early + [("kept", 2.5), ("kept", 3.0)], -math.inf)
    _results(table, fired_at)
    table.compact_rows(force=True)  # as an export does: six slots freed, "kept" moves to slot 0
    assert table.slots.n == 1 and table.slots.keys == ["kept"]
    newcomers = [(f"new{i}", 4.5) for i in range(6)]
    _add(table, newcomers, fired_at)
    fired = _results(table, math.inf)
    one = 1 if reduction is Reduction.COUNT else None
    for key, _start, result in fired:
        if key.startswith("new"):  # one record each: its count is 1, its sum or max its own value
            assert result == (one if one is not None else int(key[3:]) + 1), (key, result)
    assert {k for k, _, _ in fired} == {"kept", *(k for k, _ in newcomers)}


@pytest.mark.parametrize("reduction", [Reduction.COUNT, Reduction.SUM])
def test_freed_slots_start_empty_in_purged_columns_used_again(reduction: Reduction) -> None:
    """The freed slots' cells in purged columns: keys with records in many slices go idle and
    are compacted away, the table moves its live columns left over the purged ones once it has
    appended as many as it holds, and new keys in the freed slots get columns where the old
    keys' partials were."""
    table = _table(Tumbling(2.0), reduction)
    cap = table.partials.first_columns
    spread = cap // 2  # the old keys hold a record in each of this many slices
    _add(table, [(f"old{i}", 2 * j + 0.5) for j in range(spread) for i in range(6)] + [("kept", 2 * spread + 0.5)],
         -math.inf)
    _results(table, 2.0 * spread)
    table.compact_rows(force=True)
    assert table.slots.n == 1
    watermark = 2.0 * spread
    t = 2 * spread + 2
    moved = False
    while not moved:  # until the live column moves left, over the purged ones
        end = table.partials.c0 + table.partials.ncols
        _add(table, [("kept", t + 0.5)], watermark)
        moved = table.partials.c0 + table.partials.ncols < end
        watermark = float(t)
        _results(table, watermark)
        t += 2
        assert t < 8 * cap
    _add(table, [(f"new{i}", t + 0.5) for i in range(6)], watermark)
    fired = [r for r in _results(table, math.inf) if r[0].startswith("new")]
    assert fired == [(f"new{i}", float(t), 1 if reduction is Reduction.COUNT else i + 1) for i in range(6)]
