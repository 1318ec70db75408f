"""Sessions as columns, and the two vectorized steps of a session table: cut a batch into runs,
and merge runs into the sessions they touch.

A session is a slice that merges (dissertation §5.2.2): a record's own window is `[ts, ts + gap)`
and two windows that overlap or touch are one session. Over a batch sorted by key and time that
is a cut wherever two neighbours of a key are more than `gap` apart (`runs`); merging runs into
stored sessions is an interval union per key, ordered by start, that starts a new session where
a start lies beyond every end before it (`union`). Both are a few sorts and reductions over the
whole batch (`np.lexsort`, `ufunc.reduceat`): no Python per key or per session. The rules are
those of `sessions.Sessions`, the per-key path, so both give the same sessions for the same
records in any order.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .table_partials import Reduction

_REDUCE = {Reduction.SUM: np.add, Reduction.MIN: np.minimum, Reduction.MAX: np.maximum}


@dataclass(frozen=True, slots=True)
class SessionRows:
    """Sessions, one per row: of the key in slot `slot[i]` and query `query[i]`, spanning
    `[start[i], end[i])` (`end`: its last record's time + the gap), holding `count[i]` records
    and their partial `value[i]` (sum, min or max; None for a count); `changed[i]`: it holds
    records its last emitted result did not (or was never emitted). Rows are in no order."""

    slot: np.ndarray
    query: np.ndarray
    start: np.ndarray
    end: np.ndarray
    count: np.ndarray
    value: np.ndarray | None
    changed: np.ndarray

    def __len__(self) -> int:
        return len(self.slot)

    def take(self, rows: np.ndarray) -> SessionRows:
        return SessionRows(self.slot[rows], self.query[rows], self.start[rows], self.end[rows], self.count[rows],
                           None if self.value is None else self.value[rows], self.changed[rows])

    @staticmethod
    def empty(value_dtype: np.dtype | None) -> SessionRows:
        ints, floats = np.empty(0, np.int64), np.empty(0, np.float64)
        return SessionRows(ints, ints, floats, floats, ints,
                           None if value_dtype is None else np.empty(0, value_dtype), np.empty(0, np.bool_))

    @staticmethod
    def concat(parts: list[SessionRows]) -> SessionRows:
        """The rows of every part (their values of one dtype, or all None)."""
        parts = [p for p in parts if len(p)] or parts[:1]
        if len(parts) == 1:
            return parts[0]
        values = [p.value for p in parts]
        return SessionRows(
            np.concatenate([p.slot for p in parts]), np.concatenate([p.query for p in parts]),
            np.concatenate([p.start for p in parts]), np.concatenate([p.end for p in parts]),
            np.concatenate([p.count for p in parts]),
            None if values[0] is None else np.concatenate(values),  # type: ignore[arg-type]
            np.concatenate([p.changed for p in parts]))

    def with_values(self, dtype: np.dtype) -> SessionRows:
        """The same rows with their partials as `dtype` (integers turned to floats)."""
        if self.value is None or self.value.dtype == dtype:
            return self
        return SessionRows(self.slot, self.query, self.start, self.end, self.count, self.value.astype(dtype),
                           self.changed)


def runs(slots: np.ndarray, ts: np.ndarray, values: np.ndarray | None, query: int, gap: float,
         reduction: Reduction) -> SessionRows:
    """A batch's rows (key slot, time, value) of one session query cut into runs: per key, times
    in order, a new run wherever the next time is more than `gap` after the last; each run one
    (changed) session."""
    if not len(ts):
        return SessionRows.empty(None if values is None else values.dtype)
    order = np.lexsort((ts, slots))
    sorted_slots, sorted_ts = slots[order], ts[order]
    bounds = np.flatnonzero(np.r_[True, (sorted_slots[1:] != sorted_slots[:-1])
                                  | (sorted_ts[1:] > sorted_ts[:-1] + gap)])
    lasts = np.r_[bounds[1:], len(order)] - 1
    n = len(bounds)
    value = None if values is None else _REDUCE[reduction].reduceat(values[order], bounds)
    return SessionRows(sorted_slots[bounds], np.full(n, query, np.int64), sorted_ts[bounds], sorted_ts[lasts] + gap,
                       np.diff(np.r_[bounds, len(order)]), value, np.ones(n, np.bool_))


def lanes(rows: SessionRows, slots: int) -> np.ndarray:
    """One number per (query, key slot): the sessions that may merge share it."""
    return rows.query * slots + rows.slot


def union(rows: SessionRows, slots: int, reduction: Reduction) -> SessionRows:
    """Merge the sessions of each (query, key) that overlap or touch (`start <= end` of one
    before it, as a record joins a session it touches): their counts and partials combined, a
    merged session changed if any part was. The result is ordered by (query, key slot, start)."""
    n = len(rows)
    if n < 2:
        return rows
    lane = lanes(rows, slots)
    order = np.lexsort((rows.start, lane))
    lane, start, end = lane[order], rows.start[order], rows.end[order]
    # the largest end before each row in its lane: a running maximum over (lane, rank of end),
    # which orders lanes first, so no lane sees a larger one's ends
    by_end = np.argsort(end, kind="stable")
    rank = np.empty(n, np.int64)
    rank[by_end] = np.arange(n)
    largest = np.maximum.accumulate(lane * n + rank)
    same = lane[1:] == lane[:-1]
    before = np.where(same, largest[:-1] - lane[1:] * n, 0)
    apart = ~same | (start[1:] > end[by_end][before])
    bounds = np.flatnonzero(np.r_[True, apart])
    if len(bounds) == n:
        return rows.take(order)
    value = None if rows.value is None else _REDUCE[reduction].reduceat(rows.value[order], bounds)
    return SessionRows(rows.slot[order][bounds], rows.query[order][bounds], start[bounds],
                       np.maximum.reduceat(end, bounds), np.add.reduceat(rows.count[order], bounds), value,
                       np.logical_or.reduceat(rows.changed[order], bounds))
