"""Columnar window state for periodic queries: one slice table, every key's windows fired at once.

The per-key `SliceStore` path costs a Python call per (key, slice) group of a batch and fires
each key on its own timer. For periodic queries (`Tumbling`, `Sliding`, any number of them) with
an associative aggregate (count, sum, min, max) the same shared slices (dissertation §5.3.1,
§5.4.3) fit a table: one row per key, one column per slice holding a record of any key, partials
as numpy matrices (`counts`, and `values` for sum/min/max). A batch adds its rows with one
grouping pass (`add`); a watermark fires every due window of every key in one pass (`fire`):
Cutty's `lookup(start, end)` (§5.5.2, Algorithm 8) becomes a prefix sum along the slice axis for
count and sum and a reduction over a column range for min and max, for all keys at once. A window
produces a result for a key only if the key had records in it, as on the per-key path.

Lateness and re-firing follow `engine.Windowing` exactly: a row behind the watermark is checked
per query (rare, per row), counted where a window holding it is still open, and its cell is
marked `changed`; at the next firing every complete, still-open window holding a changed cell of
a key fires again with the updated result. Each key keeps the watermark it was last fired at
(`fired`), so tables restored from subtasks at different watermarks fire each key exactly as its
own store would have.

The table is working state. Keyed state holds it per key group (`table_state.GroupSlices`, one
entry per key group, `export`/`load`), so it is checkpointed, restored and rescaled with its key
groups. Firing and the arithmetic of window indices live in `table_fire`.

The prefix sums kept across firings are `prefix.KeptPrefixSums`. About 490 lines, past the usual
450: the matrices' shape (slots, columns) and the fold of a batch into them change together and
read best side by side.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from enum import Enum
from typing import Any

import numpy as np
import pyarrow as pa

from .calendar import WindowCalendar
from .columnar import key_codes
from .grid import Grid
from .prefix import KeptPrefixSums
from .store import SliceStore
from .table_fire import FiredColumns, QueryIndex, fire
from .table_state import GroupSlices, export, key_store, load

_MOST_FIRST_COLUMNS = 4096  # at most this many columns allocated before they are needed
_FIRST_BYTES = 64 << 20  # and at most this much memory (virtual: pages are touched when used)
_DENSE_CELLS = 4096  # a batch's (key, slice) cells are reduced densely up to 4 per row + this


class Reduction(Enum):
    """The aggregates a slice table computes."""

    COUNT = "count"
    SUM = "sum"
    MIN = "min"
    MAX = "max"


@dataclass(frozen=True, slots=True)
class TableAdmission:
    """What became of a batch's rows."""

    late_rows: np.ndarray  # rows too late for at least one query, ascending
    late_queries: list[tuple[str, ...]]  # per late row: the queries it is too late for
    late_updates: bool  # a row behind the watermark was counted: windows fire again


def identity(reduction: Reduction, dtype: np.dtype[Any]) -> Any:
    """The partial of an empty cell."""
    if reduction is Reduction.MIN:
        return np.inf if dtype.kind == "f" else np.iinfo(dtype).max
    if reduction is Reduction.MAX:
        return -np.inf if dtype.kind == "f" else np.iinfo(dtype).min
    return 0


def matrix(rows: int, cols: int, dtype: Any, fill: Any) -> np.ndarray:
    """A partials matrix, column-major: a slice's cells are contiguous, so what runs per slice
    (a batch's block, a prefix sum's new column, moving columns) reads and writes runs of memory."""
    if not fill:
        return np.zeros((rows, cols), dtype=dtype, order="F")  # pages untouched until used
    return np.full((rows, cols), fill, dtype=dtype, order="F")


def first_columns(grid: Grid) -> int:
    """Columns to allocate at first: the slices the longest window and the allowed lateness
    span at the queries' rate of edges, half as many again and 64 more (bounded; the live
    columns also span the watermark's delay), so that fine slides or many queries neither
    reshape the matrices while the first windows fill nor spread over memory they touch once:
    purged columns are used again (`_append`). Counts and sums are column-major and zeroed
    lazily (min and max partials are filled with their identity, so they start at 16 columns).
    """
    edges_per_second = sum(1.0 / period for _, period, _ in grid.edges.progressions)
    span = max(w.size for w in grid.windows) + grid.lateness
    return int(min(_MOST_FIRST_COLUMNS, 1.5 * edges_per_second * span + 64.0))


def value_dtype(values: np.ndarray) -> np.dtype[Any] | None:
    """The partials' dtype for a value column: int64 or float64; None for other types."""
    kind = values.dtype.kind
    if kind in "iu":
        return np.dtype(np.int64)
    if kind == "f":
        return np.dtype(np.float64)
    return None


class SliceTable:
    """Every key's slices of one operator's periodic queries, as numpy matrices.

    Rows are slots `[0, n)` (`keys[slot]`, its key group, its `fired` watermark); the live
    columns are `[c0, c0 + ncols)` of matrices of `col_cap` columns, ordered by slice start
    (`starts`, `ends`); cells right of them, and rows from `n` on, hold the identity; columns
    left of them were purged and hold what they held (see `purge`). Columns are sparse: a slice
    is a column once some key has a record in it.
    """

    def __init__(self, grid: Grid, reduction: Reduction) -> None:
        self.grid = grid
        self.edges = grid.edges
        self.lateness = grid.lateness
        self.reduction = reduction
        self.names = grid.names
        self.keys: list[Any] = []
        self.slot_of: dict[Any, int] = {}
        self.n = 0
        self.groups = np.empty(0, dtype=np.int64)
        self.fired = np.empty(0, dtype=np.float64)
        self.starts = np.empty(0, dtype=np.float64)
        self.ends = np.empty(0, dtype=np.float64)
        self.c0 = 0
        self.counts = np.zeros((0, 0), dtype=np.int64)
        self.values: np.ndarray | None = None
        self.changed: np.ndarray | None = None
        self.has_changes = False  # some `changed` cell is set: fire at the next watermark
        self.due_at = -math.inf  # no window ends before this (a lower bound): firing is skipped
        self.version = 0  # bumped when keys are added or slots move (caches of `keys` go stale)
        # (version, every key as Arrow, {w: every key w times over}): see table_fire._keys
        self.key_cache: tuple[int, pa.Array | None, dict[int, pa.Array]] | None = None
        self.index = QueryIndex(grid.windows)
        self.first_columns = first_columns(grid)
        self.calendar = WindowCalendar(grid.windows, grid.lateness, self.edges)  # what fires when
        self.prefix = KeptPrefixSums()  # of `counts` (and integer `values`), kept across firings

    # -- shape ----------------------------------------------------------------------------------

    @property
    def ncols(self) -> int:
        return len(self.starts)

    def empty_partial(self) -> Any:
        assert self.values is not None
        return identity(self.reduction, self.values.dtype)

    def _allocate(self, rows: int, cols: int) -> tuple[np.ndarray, np.ndarray | None, np.ndarray | None]:
        counts = matrix(rows, cols, np.int64, 0)
        values = None if self.values is None else matrix(rows, cols, self.values.dtype, self.empty_partial())
        changed = None if self.changed is None else matrix(rows, cols, np.bool_, False)
        return counts, values, changed

    def _reshape(self, rows: int, cols: int, col_at: np.ndarray) -> None:
        """New matrices of `rows` x `cols`; live column `j` moves to column `col_at[j]`."""
        counts, values, changed = self._allocate(rows, cols)
        n, live = self.n, slice(self.c0, self.c0 + self.ncols)
        if n and len(col_at):
            counts[:n, col_at] = self.counts[:n, live]
            if values is not None:
                assert self.values is not None
                values[:n, col_at] = self.values[:n, live]
            if changed is not None:
                assert self.changed is not None
                changed[:n, col_at] = self.changed[:n, live]
        self.counts, self.values, self.changed = counts, values, changed
        self.c0 = 0
        self.prefix.drop()

    def _shift_left(self) -> None:
        """Move the live columns to column 0 in place (purged columns freed room on the left);
        the kept prefix sums move along."""
        c0, width, n = self.c0, self.ncols, self.n
        if not c0:
            return
        for matrix in (self.counts, self.values, self.changed):
            if matrix is not None:
                matrix[:n, :width] = matrix[:n, c0:c0 + width]
                matrix[:n, width:c0 + width] = 0 if matrix is not self.values else self.empty_partial()
        self.prefix.shift(c0, n)
        self.c0 = 0

    def ensure_values(self, dtype: np.dtype[Any]) -> None:
        """Hold value partials of `dtype` (an int table becomes float when a float arrives)."""
        if self.values is not None and (self.values.dtype == dtype or self.values.dtype.kind == "f"):
            return
        shape = self.counts.shape
        if self.values is None:
            self.values = matrix(*shape, dtype, identity(self.reduction, dtype))
            return
        upcast = self.values.astype(dtype, order="F")
        upcast[self.counts == 0] = identity(self.reduction, dtype)
        self.values = upcast

    def ensure_changed(self) -> np.ndarray:
        if self.changed is None:
            self.changed = matrix(*self.counts.shape, np.bool_, False)
        return self.changed

    # -- keys -----------------------------------------------------------------------------------

    def slots(self, keys: list[Any], group_of: Callable[[Any], int], fired: float) -> np.ndarray:
        """The slot of each key; a new key gets one (its key group from `group_of`, last fired
        at `fired`: no window ending by then can hold its records)."""
        slot_of = self.slot_of
        out = [slot_of.get(k, -1) for k in keys]
        if -1 in out:
            self.reserve(out.count(-1))  # may move slots: look them up again
            slot_of = self.slot_of
            out = [slot_of.get(k, -1) for k in keys]
            for i, k in enumerate(keys):
                if out[i] == -1:
                    out[i] = self.new_slot(k, group_of(k), fired)
            self.due_at = min(self.due_at, self.calendar.first_end_after(fired))
        return np.array(out, dtype=np.int64)

    def reserve(self, new_keys: int) -> None:
        """Room for `new_keys` more slots: drop empty ones, or grow (slots may move)."""
        if self.n + new_keys <= len(self.fired):
            return
        self.compact_rows()
        if self.n + new_keys > len(self.fired):
            cap = max(16, 2 * (self.n + new_keys))
            self.groups = np.resize(self.groups, cap)
            self.fired = np.resize(self.fired, cap)
            self._reshape(cap, self.counts.shape[1], np.arange(self.ncols))

    def new_slot(self, key: Any, group: int, fired: float) -> int:
        """A slot for a new key (after `reserve`)."""
        slot = self.n
        self.keys.append(key)
        self.slot_of[key] = slot
        self.groups[slot] = group
        self.fired[slot] = fired
        self.n = slot + 1
        self.version += 1
        return slot

    def live_rows(self) -> np.ndarray:
        """Whether each slot holds anything a future watermark could need."""
        n, live = self.n, slice(self.c0, self.c0 + self.ncols)
        alive = np.asarray(self.counts[:n, live].any(axis=1))
        if self.changed is not None:
            alive = alive | np.asarray(self.changed[:n, live].any(axis=1))
        return alive

    def compact_rows(self, force: bool = False) -> None:
        """Drop the slots of keys that hold nothing (if that frees at least a quarter)."""
        n = self.n
        if not n:
            return
        alive = self.live_rows()
        kept = np.flatnonzero(alive)
        if len(kept) == n or (not force and len(kept) > 3 * n // 4):
            return
        m = len(kept)
        self.keys = [self.keys[i] for i in kept.tolist()]
        self.slot_of = {k: i for i, k in enumerate(self.keys)}
        self.groups[:m] = self.groups[kept]
        self.fired[:m] = self.fired[kept]
        if not m:  # nothing left (the end of the input, every key idle): fresh matrices, zeroed
            self.counts, self.values, self.changed = self._allocate(*self.counts.shape)  # lazily
        live, used = slice(self.c0, self.c0 + self.ncols), slice(0, self.c0 + self.ncols)
        for matrix in (self.counts, self.values, self.changed) if m else ():
            if matrix is not None:  # the live columns move; the freed rows are cleared where
                matrix[:m, live] = matrix[kept, live]  # cells were ever written (purged ones too)
                matrix[m:n, used] = 0 if matrix is not self.values else self.empty_partial()
        self.n = m
        self.version += 1
        self.prefix.forget()

    # -- columns --------------------------------------------------------------------------------

    def columns(self, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
        """The matrix column of each slice `[starts[i], ends[i])` (sorted, distinct starts),
        adding the columns not there yet."""
        live = self.starts
        m, count = len(live), len(starts)
        if not m or starts[0] > live[-1]:  # in order: all after the last column
            self._append(starts, ends)
            return np.arange(self.c0 + m, self.c0 + m + count)
        first = int(live.searchsorted(starts[0]))
        k = min(m - first, count)
        if (k == count or starts[k] > live[-1]) and (live[first:first + k] == starts[:k]).all():
            # the usual batch: some of the last columns, in a run, then new ones
            if k < count:
                self._append(starts[k:], ends[k:])
            return np.arange(self.c0 + first, self.c0 + first + count)
        pos = live.searchsorted(starts)
        found = (pos < m) & (live[np.minimum(pos, m - 1)] == starts)
        if found.all():
            return pos + self.c0
        starts_new, ends_new = starts[~found], ends[~found]
        if starts_new[0] > live[-1]:  # the new ones after the last column
            self._append(starts_new, ends_new)
        else:  # out of order: rebuild around the new columns
            merged = np.concatenate([live, starts_new])
            order = np.argsort(merged, kind="stable")
            merged_ends = np.concatenate([self.ends, ends_new])[order]
            col_at = np.empty(len(merged), dtype=np.int64)
            col_at[order] = np.arange(len(merged))
            self._reshape(self.counts.shape[0], max(self.counts.shape[1], 16, 2 * len(merged)), col_at[:m])
            self.starts, self.ends = merged[order], merged_ends
        return np.searchsorted(self.starts, starts) + self.c0

    def _append(self, starts: np.ndarray, ends: np.ndarray) -> None:
        """Add columns after the last one: room made on the left while a quarter of the
        capacity stays free after the move (the columns, and their memory, are used again), else
        by doubling the matrices (a reshape copies every cell and drops the kept prefix sums)."""
        live = len(self.starts)
        cap = self.counts.shape[1]
        if self.c0 + live + len(starts) > cap:
            total = live + len(starts)
            if total + max(16, cap // 4) <= cap:
                self._shift_left()
            else:
                first = 16
                if self.values is None or not self.empty_partial():  # zeroed lazily: see first_columns
                    first = min(self.first_columns, _FIRST_BYTES // (8 * max(1, self.counts.shape[0])))
                self._reshape(self.counts.shape[0], max(first, 2 * cap, 2 * total), np.arange(live))
        self.starts = np.concatenate([self.starts, starts])
        self.ends = np.concatenate([self.ends, ends])

    def purge(self, first_needed: float) -> None:
        """Drop the columns of slices before `first_needed` (no window can need them). Their
        cells keep what they held until the columns are used again (`_shift_left` overwrites or
        clears every column left of the live ones; here, when none is left): a purge runs at
        most firings, and clearing a column of a row-major matrix touches every row's memory."""
        drop = int(self.starts.searchsorted(first_needed))
        if not drop:
            return
        self.c0 += drop
        self.starts, self.ends = self.starts[drop:], self.ends[drop:]
        if not len(self.starts):
            dead, n = slice(0, self.c0), self.n
            for matrix in (self.counts, self.values, self.changed):
                if matrix is not None:
                    matrix[:n, dead] = 0 if matrix is not self.values else self.empty_partial()
            self.c0 = 0
            self.prefix.forget()

    # -- adding ---------------------------------------------------------------------------------

    def add(self, keys: Any, ts: np.ndarray, values: np.ndarray | None, watermark: float,
            group_of: Callable[[Any], int], weights: np.ndarray | None = None) -> TableAdmission:
        """Add a batch: `keys` (Arrow, numpy or a list), `ts` (float64 seconds), `values`
        (numeric numpy, None for a count) at the operator's `watermark`; `weights`: how many
        records each row stands for (rows of partials from a local phase), else one each."""
        codes, distinct = key_codes(keys)
        if len(codes) != len(ts) or (values is not None and len(values) != len(ts)):
            raise ValueError(f"keys, timestamps and values differ in length: {len(codes)}, {len(ts)}, "
                             f"{'-' if values is None else len(values)}")
        if values is not None:
            dtype = value_dtype(values)
            if dtype is None:
                raise TypeError(f"{self.reduction.value} on the columnar path needs numbers, got {values.dtype}")
            self.ensure_values(dtype)
        slots = self.slots(distinct, group_of, watermark)
        behind = np.flatnonzero(ts < watermark)
        late_rows: list[int] = []
        late_queries: list[tuple[str, ...]] = []
        updated = np.empty(0, dtype=np.int64)
        keep: np.ndarray | None = None
        if len(behind):
            keep = np.ones(len(ts), dtype=np.bool_)
            counted: list[int] = []
            for row, t in zip(behind.tolist(), ts[behind].tolist()):
                accepted, late = self._behind(t, watermark)
                if late:
                    late_rows.append(row)
                    late_queries.append(late)
                if accepted:
                    counted.append(row)
                else:
                    keep[row] = False
            updated = np.array(counted, dtype=np.int64)
        if keep is not None:
            kept = np.flatnonzero(keep)
            self._accumulate(codes[kept], slots, ts[kept], None if values is None else values[kept],
                             np.searchsorted(kept, updated), None if weights is None else weights[kept])
        else:
            self._accumulate(codes, slots, ts, values, updated, weights)
        return TableAdmission(np.array(late_rows, dtype=np.int64), late_queries, bool(len(updated)))

    def _behind(self, ts: float, watermark: float) -> tuple[bool, tuple[str, ...]]:
        """A row behind the watermark: whether some query counts it, and those it is late for
        (the rules of `Grid.add_behind`: late where every window holding it closed)."""
        accepted = False
        late: list[str] = []
        lateness = self.lateness
        for name, w in zip(self.names, self.grid.windows):
            end = w.end_of(w.last_start_index(ts))
            if end <= ts:
                continue  # a sampling gap: in no window of this query
            if end + lateness <= watermark:
                late.append(name)
            else:
                accepted = True
        return accepted, tuple(late)

    def _accumulate(self, codes: np.ndarray, slots: np.ndarray, ts: np.ndarray, values: np.ndarray | None,
                    updated: np.ndarray, weights: np.ndarray | None = None) -> None:
        """Fold rows into their (key, slice) cells; rows `updated` (indices) also mark theirs;
        a row counts `weights[row]` records (one each without weights)."""
        if not len(ts):
            return
        index, slice_starts, slice_ends = self.edges.slices_of(ts)
        present = np.bincount(index, minlength=len(slice_starts)) > 0  # no sort: slice indices are small
        used = np.flatnonzero(present)
        local = (np.cumsum(present) - 1)[index]
        cols = self.columns(slice_starts[used], slice_ends[used])
        nk, nc = len(slots), len(used)
        counts, reduction = self.counts, self.reduction
        first_col, last_col = int(cols[0]), int(cols[-1])
        budget = 4 * len(ts) + _DENSE_CELLS
        rows = int(slots.max()) + 1
        block: Any = None
        if last_col - first_col + 1 == nc and rows * nc <= budget:
            # the usual batch: its cells as one block of slots [0, rows) x adjacent columns, a
            # view of the (column-major) matrices, filled column by column: no gather, no scatter
            cell = local * rows + slots[codes]
            nk, block = rows, (slice(0, rows), slice(first_col, last_col + 1))
        elif nk * nc <= budget:  # a few keys, or columns apart: a gathered block
            cell = local * nk + codes
            block = np.ix_(slots, cols)
        if block is not None:
            if weights is None:
                counts[block] += np.bincount(cell, minlength=nk * nc).reshape(nc, nk).T
            else:
                added = np.zeros(nk * nc, dtype=counts.dtype)
                np.add.at(added, cell, weights)
                counts[block] += added.reshape(nc, nk).T
            if values is not None:
                assert self.values is not None
                dense = np.full(nk * nc, identity(reduction, self.values.dtype), dtype=self.values.dtype)
                if reduction is Reduction.SUM:
                    np.add.at(dense, cell, values)
                    self.values[block] += dense.reshape(nc, nk).T
                elif reduction is Reduction.MIN:
                    np.minimum.at(dense, cell, values)
                    self.values[block] = np.minimum(self.values[block], dense.reshape(nc, nk).T)
                else:
                    np.maximum.at(dense, cell, values)
                    self.values[block] = np.maximum(self.values[block], dense.reshape(nc, nk).T)
        else:
            rows, at = slots[codes], cols[local]
            np.add.at(counts, (rows, at), 1 if weights is None else weights)
            if values is not None:
                assert self.values is not None
                ufunc = {Reduction.SUM: np.add, Reduction.MIN: np.minimum, Reduction.MAX: np.maximum}[reduction]
                ufunc.at(self.values, (rows, at), values)
        self.prefix.stale_from(int(cols.min()))
        if len(updated):
            self.ensure_changed()[slots[codes[updated]], cols[local[updated]]] = True
            self.has_changes = True

    def fire(self, watermark: float) -> FiredColumns | None:
        """Every key's windows due at `watermark` (`table_fire.fire`); call it whenever the
        watermark moves, before adding rows at the new watermark."""
        return fire(self, watermark)

    def prefix_sums(self, upto: int) -> tuple[np.ndarray, np.ndarray | None]:
        """Prefix sums of every slot's counts (and integer sums) along the columns, as
        `sums[column, slot]`, valid from column `c0` to `upto` (absolute; `prefix`)."""
        integer = self.values is not None and self.reduction is Reduction.SUM and self.values.dtype.kind == "i"
        return self.prefix.update(self.counts, self.values if integer else None, self.n, self.c0, upto)

    # -- keyed state ----------------------------------------------------------------------------

    def export(self) -> dict[int, GroupSlices]:
        """Every key group's state (key groups holding nothing are left out)."""
        return export(self)

    def load(self, entries: Iterable[tuple[int, GroupSlices]]) -> None:
        """Add key groups' state (restored, or gained by rescaling)."""
        load(self, entries)

    def clear(self) -> None:
        """Forget everything (before loading the key groups a subtask owns now)."""
        self.__init__(self.grid, self.reduction)  # type: ignore[misc]

    def key_store(self, key: Any) -> SliceStore | None:
        """One key's slices as the per-key path's `SliceStore` (a live state query), or None."""
        return key_store(self, key)
