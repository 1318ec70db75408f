"""A slice table's partials: every key's slices as numpy matrices, one row per slot, one column per slice.

Cutty's aggregate store (dissertation §5.5.2, Algorithm 8: `insert`, `lookup`, `purge`) for the
associative aggregates a table computes (count, sum, min, max), for all keys at once: the shared
slices of the periodic queries (§5.3.1, §5.4.3) are columns, a slice being a column once some
key has a record in it, and each cell holds one key's partial of one slice (`counts`, and
`values` for sum, min and max). `fold` inserts a batch with one grouping pass; `results` is the
lookup of many windows for many keys (`table_lookup`), from prefix sums kept across firings
(`prefix.KeptPrefixSums`) for count and sum; `purge` drops the columns no window needs.

A row behind the watermark also marks its cell in `changed`: the windows holding it fire again.
The matrices' shape (rows, columns) and where the live columns sit in them change together with
the fold, so they are one type; which key a row holds is `table_slots.KeySlots`.
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import Enum
from typing import Any

import numpy as np

from .edges import SliceEdges
from .grid import Grid
from .prefix import KeptPrefixSums
from .table_lookup import window_results
from .table_state import GroupSlices

_MOST_FIRST_COLUMNS = 4096  # at most this many columns allocated before they are needed
_FIRST_BYTES = 64 << 20  # and at most this much memory (virtual: pages are touched when used)
_DENSE_CELLS = 4096  # a batch's (key, slice) cells are reduced densely up to 4 per row + this


class Reduction(Enum):
    """The aggregates a slice table computes."""

    COUNT = "count"
    SUM = "sum"
    MIN = "min"
    MAX = "max"


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


class SlicePartials:
    """Every slot's partials of every live slice.

    Rows `[0, n)` are in use (the table's slots); the live columns are `[c0, c0 + ncols)` of
    matrices of `col_cap` columns, ordered by slice start (`starts`, `ends`); cells right of
    them, and rows from `n` on, hold the identity; columns left of them were purged and hold
    what they held (see `purge`).
    """

    def __init__(self, reduction: Reduction, edges: SliceEdges, first_columns: int) -> None:
        self.reduction = reduction
        self.edges = edges
        self.first_columns = first_columns
        self.n = 0
        self.starts = np.empty(0, dtype=np.float64)
        self.ends = np.empty(0, dtype=np.float64)
        self.c0 = 0
        self.counts = np.zeros((0, 0), dtype=np.int64)
        self.values: np.ndarray | None = None
        self.changed: np.ndarray | None = None
        self.has_changes = False  # some `changed` cell is set: fire at the next watermark
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

    # -- rows -----------------------------------------------------------------------------------

    def grow_rows(self, rows: int) -> None:
        """Matrices of `rows` rows (the slots' new capacity)."""
        self._reshape(rows, self.counts.shape[1], np.arange(self.ncols))

    def live_rows(self) -> np.ndarray:
        """Whether each slot holds anything a future watermark could need."""
        n, live = self.n, slice(self.c0, self.c0 + self.ncols)
        alive = np.asarray(self.counts[:n, live].any(axis=1))
        if self.changed is not None:
            alive = alive | np.asarray(self.changed[:n, live].any(axis=1))
        return alive

    def keep_rows(self, kept: np.ndarray) -> None:
        """Keep only the rows `kept` (ascending), moved to `[0, len(kept))`; the freed rows are
        cleared where cells were ever written (purged columns too)."""
        n, m = self.n, len(kept)
        if not m:  # nothing left (the end of the input, every key idle): fresh matrices, zeroed
            self.counts, self.values, self.changed = self._allocate(*self.counts.shape)  # lazily
        live, used = slice(self.c0, self.c0 + self.ncols), slice(0, self.c0 + self.ncols)
        for matrix in (self.counts, self.values, self.changed) if m else ():
            if matrix is not None:
                matrix[:m, live] = matrix[kept, live]
                matrix[m:n, used] = 0 if matrix is not self.values else self.empty_partial()
        self.n = m
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

    # -- insert ---------------------------------------------------------------------------------

    def fold(self, codes: np.ndarray, slots: np.ndarray, ts: np.ndarray, values: np.ndarray | None,
             updated: np.ndarray, weights: np.ndarray | None = None) -> None:
        """Fold rows into their (key, slice) cells: row `i` of key `slots[codes[i]]` at `ts[i]`;
        rows `updated` (indices, behind the watermark) also mark theirs `changed`; a row counts
        `weights[i]` records (partials of a local phase), else one."""
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

    # -- lookup ---------------------------------------------------------------------------------

    def results(self, rows: slice | np.ndarray, a: np.ndarray, b: np.ndarray,
                late: np.ndarray | None) -> tuple[np.ndarray | None, np.ndarray]:
        """(windows x keys: whether the key has a result, None if every one has; the results) of
        the keys in `rows` for windows covering live columns `[a[j], b[j])`, ordered by end (`b`
        ascending); `late` marks re-fired windows, which hold a result only where a cell changed."""
        c0 = self.c0
        upto = c0 + int(b[-1])
        integer = self.values is not None and self.reduction is Reduction.SUM and self.values.dtype.kind == "i"
        sums, value_sums = self.prefix.update(self.counts, self.values if integer else None, self.n, c0, upto)
        return window_results(self.reduction.value, sums, value_sums, self.values, self.changed, c0, rows, a, b, late)

    def changed_in(self, rows: slice | np.ndarray) -> bool:
        """Whether a late record changed a live cell of the slots in `rows`."""
        changed = self.changed
        return bool(self.has_changes and changed is not None
                    and changed[rows, self.c0:self.c0 + self.ncols].any())

    def spend_changes(self, waiting: np.ndarray) -> None:
        """The slots not `waiting` (per slot) fired: their `changed` flags are spent."""
        assert self.changed is not None
        n, live = self.n, slice(self.c0, self.c0 + self.ncols)
        self.changed[:n, live] &= waiting[:, None]
        self.has_changes = bool(self.changed[:n, live].any())

    # -- keyed state ----------------------------------------------------------------------------

    def group_slices(self, rows: np.ndarray, keys: tuple[Any, ...], fired: np.ndarray) -> GroupSlices:
        """The rows of one key group as keyed state holds them: only the slices they hold."""
        live = slice(self.c0, self.c0 + self.ncols)
        counts = self.counts[rows, live]
        changed = None if self.changed is None else self.changed[rows, live]
        holding = counts.any(axis=0) if changed is None else counts.any(axis=0) | changed.any(axis=0)
        cols = np.flatnonzero(holding)
        return GroupSlices(
            keys, fired, self.starts[cols], self.ends[cols], counts[:, cols],
            None if self.values is None else self.values[rows, live][:, cols],
            None if changed is None or not changed.any() else changed[:, cols])

    def add_columns_of(self, entries: Sequence[GroupSlices]) -> None:
        """Room for key groups' state: the partials' type, the `changed` flags, the slices."""
        starts = np.concatenate([e.starts for e in entries])
        ends = np.concatenate([e.ends for e in entries])
        distinct, first = np.unique(starts, return_index=True)
        if any(e.values is not None for e in entries):
            kinds = [e.values.dtype for e in entries if e.values is not None]
            self.ensure_values(np.dtype(np.float64) if any(d.kind == "f" for d in kinds) else kinds[0])
        if any(e.changed is not None for e in entries):
            self.ensure_changed()
        if len(distinct):
            self.columns(distinct, ends[first])

    def put(self, slots: np.ndarray, entry: GroupSlices) -> None:
        """One key group's stored partials into the rows `slots` (after `add_columns_of`)."""
        if not len(entry.starts):
            return
        block = np.ix_(slots, np.searchsorted(self.starts, entry.starts) + self.c0)
        self.counts[block] = entry.counts
        if entry.values is not None:
            assert self.values is not None
            self.values[block] = np.where(entry.counts > 0, entry.values, self.empty_partial())
        if entry.changed is not None:
            self.ensure_changed()[block] = entry.changed
            self.has_changes = True

    def row(self, slot: int) -> tuple[np.ndarray, np.ndarray | None]:
        """One slot's live counts and value partials."""
        live = slice(self.c0, self.c0 + self.ncols)
        return self.counts[slot, live], None if self.values is None else self.values[slot, live]
