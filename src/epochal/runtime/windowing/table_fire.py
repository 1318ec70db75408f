"""Firing a `SliceTable`: every due window of every key in one pass at a watermark.

The due windows are enumerated per query by arithmetic (`QueryIndex`, vectorized over queries),
once for all keys: those ending in `(fired, watermark]` (on time) and, when late records changed
cells, the complete windows still open for late records (`end + allowed_lateness > fired`).
Each window covers a range of columns (slices never straddle a window boundary); its result for
every key is Cutty's `lookup(start, end)` (dissertation §5.5.2, Algorithm 8) done as a prefix
sum along the slice axis (count, sum: two gathers and a subtraction per window) or a reduction
over the range (min, max). A key gets a result for a window only if it had records there (and,
for a re-firing, a changed cell). Results come window by window, ordered by (end, start, query),
keys in slot order within a window; each key's results are in the per-key path's order.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from ...plan.windows import PeriodicWindow
from .edges import first_end_indices
from .store import Firing

if TYPE_CHECKING:
    from .table import SliceTable

_SCALAR_LIMIT = 12  # up to this many queries, index arithmetic runs per query in Python
_CELLS = 1 << 20  # keys x windows computed at once (bounds the memory of a firing)
_KEY_RUNS = 8  # every key w times over, kept for this many w (Arrow arrays: shared, never changed)
_FEW_WINDOWS = 8  # up to this many windows, results are row differences, not a gather


@dataclass(frozen=True, slots=True)
class FiredColumns:
    """Window results of many keys, one entry per (window, key)."""

    keys: pa.Array | list[Any]
    query: np.ndarray  # index of the query
    start: np.ndarray
    end: np.ndarray
    result: np.ndarray
    late_update: np.ndarray  # bool: a re-firing (Firing.LATE_UPDATE), else Firing.ON_TIME
    windows: np.ndarray | None = None  # the query of each window, when each holds every key in slot order

    def __len__(self) -> int:
        return len(self.query)

    def firings(self) -> list[Firing]:
        return [Firing.LATE_UPDATE if u else Firing.ON_TIME for u in self.late_update.tolist()]

    def key_list(self) -> list[Any]:
        return self.keys.to_pylist() if isinstance(self.keys, pa.Array) else list(self.keys)


class QueryIndex:
    """Window index arithmetic of the periodic queries, vectorized over queries, with the float
    expressions of `plan.windows` (`start = offset + k * slide`, `end = start + size`)."""

    def __init__(self, windows: tuple[PeriodicWindow, ...]) -> None:
        self.queries = windows
        self._first_end: dict[float, np.ndarray] = {}  # the last few answers: a firing's watermark
        self.scalar = len(windows) <= _SCALAR_LIMIT  # a Python loop beats numpy's overhead
        self.offset = np.array([w.offset for w in windows], dtype=np.float64)
        self.slide = np.array([w.slide for w in windows], dtype=np.float64)
        self.size = np.array([w.size for w in windows], dtype=np.float64)

    def first_end(self, t: float) -> np.ndarray:
        """Per query, the first window ending after `t` (finite); remembered for the next firing,
        which starts where this one ended."""
        found = self._first_end.get(t)
        if found is None:
            if len(self._first_end) > 4:
                self._first_end.clear()
            if self.scalar:
                found = np.array([w.first_end_index(t) for w in self.queries], dtype=np.int64)
            else:
                found = first_end_indices(np.float64(t), self.offset, self.slide, self.size).astype(np.int64)
            self._first_end[t] = found
        return found

    def last_start(self, t: float) -> np.ndarray:
        """Per query, the last window starting at or before `t` (finite)."""
        if self.scalar:
            return np.array([w.last_start_index(t) for w in self.queries], dtype=np.int64)
        offset, slide = self.offset, self.slide
        k = np.floor((t - offset) / slide)
        for _ in range(4):
            ahead = offset + (k + 1) * slide <= t
            if not ahead.any():
                break
            k = np.where(ahead, k + 1, k)
        for _ in range(4):
            back = offset + k * slide > t
            if not back.any():
                break
            k = np.where(back, k - 1, k)
        return k.astype(np.int64)

    def first_end_after(self, t: float) -> float:
        """The earliest end, over queries, of a window ending after `t`."""
        if not math.isfinite(t):
            return t
        if self.scalar:
            return min(w.end_of(k) for w, k in zip(self.queries, self.first_end(t).tolist()))
        k = self.first_end(t).astype(np.float64)
        return float(((self.offset + k * self.slide) + self.size).min())

    def windows(self, lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(query, start, end) of windows `lo[q] <= k < hi[q]` of every query `q`."""
        if self.scalar:  # a few windows of a few queries: Python floats, the same expressions
            spans = [(q, w, k0, k1) for q, (w, k0, k1) in enumerate(zip(self.queries, lo.tolist(), hi.tolist()))
                     if k1 > k0]
            starts = [w.start_of(k) for _, w, k0, k1 in spans for k in range(k0, k1)]
            queries = [q for q, _, k0, k1 in spans for _ in range(k0, k1)]
            sizes = [w.size for _, w, k0, k1 in spans for _ in range(k0, k1)]
            start = np.array(starts, dtype=np.float64)
            return np.array(queries, dtype=np.int64), start, start + np.array(sizes, dtype=np.float64)
        count = np.maximum(hi - lo, 0)
        total = int(count.sum())
        query = np.repeat(np.arange(len(lo)), count)
        k = lo[query] + (np.arange(total) - np.repeat(np.cumsum(count) - count, count))
        start = self.offset[query] + k.astype(np.float64) * self.slide[query]
        return query, start, start + self.size[query]


def fire(table: SliceTable, watermark: float) -> FiredColumns | None:
    """Emit the windows due at `watermark` for every key, then free what no window needs."""
    n = table.n
    fired = table.fired[:n]
    if not n or not table.ncols:
        np.maximum(fired, watermark, out=fired)
        _purge(table, float(fired.min()) if n else math.inf)
        return None
    changes = table.has_changes
    low = float(fired.min())
    if low >= watermark and not changes:
        return None
    if watermark < table.due_at and not changes:  # no window ends yet: nothing to emit
        np.maximum(fired, watermark, out=fired)
        _purge(table, watermark)  # every key was behind it
        return None
    parts: list[tuple[Any, ...]]
    uniform = low == float(fired.max())
    if uniform and low <= watermark and not changes:  # the usual firing: see _fire_every_key
        found = _fire_every_key(table, low, watermark)
        fired[:] = watermark
        _purge(table, watermark)
        return found
    if uniform and low <= watermark:  # every key fired together, and is due
        parts = _fire_rows(table, slice(0, n), low, watermark)
        fired[:] = watermark
    else:
        parts = []
        due = fired <= watermark if changes else fired < watermark  # late updates fire again at once
        for p in np.unique(fired[due]).tolist():
            rows = np.flatnonzero(fired == p)
            parts.extend(_fire_rows(table, rows, float(p), watermark))
            fired[rows] = watermark
    if table.changed is not None and table.has_changes:
        live = slice(table.c0, table.c0 + table.ncols)
        table.changed[:n, live] &= (fired > watermark)[:, None]  # fired now: their flags are spent
        table.has_changes = bool(table.changed[:n, live].any())
    _purge(table, float(fired.min()))
    return _assemble(table, parts)


def _assemble(table: SliceTable, parts: list[tuple[Any, ...]]) -> FiredColumns | None:
    """One `FiredColumns` of `_fire_rows`' parts."""
    n = table.n
    if not parts:
        return None
    if len(parts) == 1:
        slots, query, start, end, result, late = parts[0]
        if isinstance(slots, int):  # every key in every window: the window of each run of rows
            return FiredColumns(_keys(table, slots), query, start, end, result, late, query[::n])
    else:
        every = np.arange(n)
        parts = [(np.tile(every, p[0]) if isinstance(p[0], int) else p[0], *p[1:]) for p in parts]
        slots, query, start, end, result, late = (np.concatenate(c) for c in zip(*parts))
    return FiredColumns(_keys(table, slots), query, start, end, result, late)


def _purge(table: SliceTable, low: float) -> None:
    """Drop the slices no window open at `low`, the lowest `fired`, can need; note when a window
    is next due."""
    if low > -math.inf:
        table.purge(table.calendar.first_open_start(low))
    table.due_at = table.calendar.first_end_after(low) if table.n else math.inf


def _keys(table: SliceTable, slots: np.ndarray | int) -> pa.Array | list[Any]:
    """The key of each slot, as Arrow (one cached array of every key) or, if Arrow cannot hold
    the keys, a list; `slots` an int `w`: every slot in order, `w` times over."""
    cached = table.key_cache
    if cached is None or cached[0] != table.version:
        try:
            array: pa.Array | None = pa.array(table.keys)
        except (pa.ArrowInvalid, pa.ArrowTypeError):
            array = None
        cached = table.key_cache = (table.version, array, {})
    array, runs = cached[1], cached[2]
    if isinstance(slots, int):
        if array is not None:  # the same few numbers of windows come again and again
            found = runs.get(slots)
            if found is None:
                if len(runs) >= _KEY_RUNS:
                    runs.clear()
                found = runs[slots] = pa.concat_arrays([array] * slots)
            return found
        slots = np.tile(np.arange(table.n), slots)
    if array is None:
        keys = table.keys
        return [keys[i] for i in slots.tolist()]
    return array.take(pa.array(slots))


def _fire_every_key(table: SliceTable, previous: float, watermark: float) -> FiredColumns | None:
    """The usual firing, with as few steps as it takes (it runs at every watermark, so its fixed
    cost grows with how many watermarks find a window due, i.e. with the number of windows):
    every key last fired at `previous`, no late record changed a cell. The due windows are the
    calendar's, their results every key's in slot order, unless some key had no record in one."""
    starts, calendar = table.starts, table.calendar
    query, start, end = calendar.ending_between(max(previous, float(starts[0])),
                                                min(watermark, float(starts[-1]) + calendar.max_size))
    if not len(query):
        return None
    a = starts.searchsorted(start)
    b = starts.searchsorted(end)
    holding = a < b
    if not holding.all():
        query, start, end, a, b = query[holding], start[holding], end[holding], a[holding], b[holding]
        if not len(query):
            return None
    n, windows = table.n, len(query)
    if windows * n > _CELLS:  # bound a firing's memory: in chunks
        return _assemble(table, _fire_rows(table, slice(0, n), previous, watermark))
    present, result = _results(table, slice(0, n), a, b, None)
    if present is None:  # every key had records in every due window
        rows = windows * n
        return FiredColumns(_keys(table, windows), query.repeat(n), start.repeat(n), end.repeat(n),
                            result.reshape(rows), np.zeros(rows, dtype=np.bool_), query)
    w, r = np.nonzero(present)
    return FiredColumns(_keys(table, r), query[w], start[w], end[w], result[w, r], np.zeros(len(w), dtype=np.bool_))


def _fire_rows(table: SliceTable, rows: slice | np.ndarray, previous: float,
               watermark: float) -> list[tuple[Any, ...]]:
    """The windows of the keys in `rows` (every slot, or an array of slots; all last fired at
    `previous`) due at `watermark`, as `(slots, query, start, end, result, late)` columns with
    `slots` an int `w` for every slot in order, `w` times over."""
    index, starts, calendar = table.index, table.starts, table.calendar
    first, last = float(starts[0]), float(starts[-1])
    # windows ending by the watermark that hold a slice: none starts after the last slice
    query, start, end = calendar.ending_between(max(previous, first), min(watermark, last + calendar.max_size))
    late: np.ndarray | None = None  # None: no window fires again
    changed = table.changed
    if table.has_changes and changed is not None and math.isfinite(previous) \
            and changed[rows, table.c0:table.c0 + table.ncols].any():
        hi = index.last_start(last) + 1
        low = index.first_end(max(previous - table.lateness, first)) - 1
        r_query, r_start, r_end = index.windows(low, np.minimum(hi, index.first_end(previous)))
        open_ = (r_end + table.lateness > previous) & (r_end > first) & (r_end <= previous)
        query, start, end = (np.concatenate([a, b[open_]]) for a, b in ((query, r_query), (start, r_start),
                                                                         (end, r_end)))
        late = np.concatenate([np.zeros(len(query) - int(open_.sum()), dtype=np.bool_),
                               np.ones(int(open_.sum()), dtype=np.bool_)])
    a = starts.searchsorted(start)
    b = starts.searchsorted(end)
    holding = a < b
    if not holding.all():
        query, start, end, a, b = query[holding], start[holding], end[holding], a[holding], b[holding]
        late = None if late is None else late[holding]
    if not len(query):
        return []
    if late is not None and len(query) > 1 and late.any():  # the calendar's come in order; re-fired join them
        order = np.lexsort((query, start, end))
        query, start, end, late, a, b = query[order], start[order], end[order], late[order], a[order], b[order]
    some = None if isinstance(rows, slice) else rows  # None: every slot
    keys = table.n if some is None else len(some)
    step = max(1, _CELLS // max(1, keys))
    out: list[tuple[Any, ...]] = []
    for i in range(0, len(query), step):
        chunk = slice(i, i + step)
        c_late = None if late is None else late[chunk]
        present, result = _results(table, rows, a[chunk], b[chunk], c_late)
        windows = len(result)
        if present is None:  # the usual case: every key had records in every due window
            slots: Any = windows if some is None else np.tile(some, windows)  # see _keys
            out.append((slots, query[chunk].repeat(keys), start[chunk].repeat(keys), end[chunk].repeat(keys),
                        result.reshape(-1),
                        np.zeros(windows * keys, dtype=np.bool_) if c_late is None else c_late.repeat(keys)))
            continue
        w, r = np.nonzero(present)
        if len(w):
            slot_ids = np.arange(table.n)[rows]
            out.append((slot_ids[r], query[chunk][w], start[chunk][w], end[chunk][w], result[w, r],
                        np.zeros(len(w), dtype=np.bool_) if c_late is None else c_late[w]))
    return out


def _prefix(matrix: np.ndarray, dtype: Any) -> np.ndarray:
    """Per row, sums of the first j columns, j = 0 .. columns."""
    out = np.zeros((matrix.shape[0], matrix.shape[1] + 1), dtype=dtype)
    np.cumsum(matrix, axis=1, out=out[:, 1:])
    return out


def _columns(prefix: np.ndarray, rows: Any, cols: np.ndarray) -> np.ndarray:
    """`prefix[cols, rows]` (windows x keys) for a slice of rows or an array of them."""
    return prefix[cols, rows] if isinstance(rows, slice) else prefix[np.ix_(cols, rows)]


def _differences(prefix: np.ndarray, rows: Any, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """`prefix[b] - prefix[a]` for the keys in `rows` (windows x keys): row by row for a few
    windows of every key (views, no gather), else by gathers."""
    if isinstance(rows, slice) and len(a) <= _FEW_WINDOWS:
        out = np.empty((len(a), rows.stop - rows.start), dtype=prefix.dtype)
        for j, (x, y) in enumerate(zip(a.tolist(), b.tolist())):
            np.subtract(prefix[y, rows], prefix[x, rows], out=out[j])
        return out
    return _columns(prefix, rows, b) - _columns(prefix, rows, a)


def _results(table: SliceTable, rows: Any, a: np.ndarray, b: np.ndarray,
             late: np.ndarray | None) -> tuple[np.ndarray | None, np.ndarray]:
    """(windows x keys: whether the key has a result, None if every one has; the results) of
    windows covering columns `[a[j], b[j])` of the live range, ordered by end (`b` ascending)."""
    c0 = table.c0
    prefix, prefix_values = table.prefix_sums(c0 + int(b[-1]))
    count = _differences(prefix, rows, c0 + a, c0 + b)
    present: np.ndarray | None = None
    if late is not None and late.any():
        assert table.changed is not None
        present = count > 0
        lo, hi = int(a[late].min()), int(b[late].max())
        flags = _prefix(table.changed[rows, c0 + lo:c0 + hi], np.int64)
        present[late] &= ((flags[:, b[late] - lo] - flags[:, a[late] - lo]) > 0).T
        if present.all():
            present = None
    elif count.size and not int(count.min()):
        present = count > 0
    reduction = table.reduction.value  # an Enum of table.py, which imports this module
    if reduction == "count":
        return present, count
    if prefix_values is not None:  # integer sums: exact from the kept prefix sums
        return present, _differences(prefix_values, rows, c0 + a, c0 + b)
    values = table.values
    assert values is not None
    lo, hi = int(a.min()), int(b.max())
    block = values[rows, c0 + lo:c0 + hi]
    a, b = a - lo, b - lo
    if reduction == "sum":
        sums = _prefix(block, values.dtype)
        return present, (sums[:, b] - sums[:, a]).T
    reduce = np.min if reduction == "min" else np.max
    result = np.empty((len(a), block.shape[0]), dtype=values.dtype)
    for j, (x, y) in enumerate(zip(a.tolist(), b.tolist())):
        result[j] = reduce(block[:, x:y], axis=1)
    return present, result
