"""The slice edges of an operator's periodic queries, by arithmetic: no list of slices needed.

Slicing for periodic windows (dissertation §5.3.1) cuts the stream wherever a window of any query
starts or ends; with out-of-order records both are needed (a window's end must be a slice edge so
a late record can be told apart from the records after it, as Scotty's slicing does), unlike
Cutty's in-order aggregator, which cuts only at window begins (§5.5.2). Each query contributes two
arithmetic progressions of edges, its starts `offset + k * slide` and its ends
`offset + k * slide + size`; the slice of a timestamp runs from the largest edge at or below it to
the smallest edge above it, over all progressions.

Edges are computed with the same float expressions as `epochal.plan.windows`, then checked, so
they compare exactly with window boundaries. Where slide, size and offset are dyadic (multiples of
2**-20, the usual 0.5, 1, 60 ...), a query's ends are folded into a progression of their own
phase (exact up to 2**32 s, about the year 2106), and identical progressions are kept once.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, TypeAlias

import numpy as np

from ...plan.windows import PeriodicWindow

_EXACT_DENOMINATOR = 1 << 20
_EXACT_MAGNITUDE = float(1 << 32)
_SCALAR_LIMIT = 12  # up to this many queries, a Python loop beats numpy's overhead
_CACHED_EDGES = 2048  # edges kept around the latest timestamps for `slice_of`
_TICKS = float(1 << 20)  # a grid's unit: 2**-20 s
_TICK_LIMIT = float(1 << 42)  # times below this many seconds have ticks within int64
_GRID_CELLS = 16  # an edge grid holds at most this many cells per edge
Numbers: TypeAlias = np.ndarray | np.floating[Any]


def _is_dyadic(value: float) -> bool:
    return abs(value) < _EXACT_MAGNITUDE and Fraction(value).denominator <= _EXACT_DENOMINATOR


def _progressions(windows: Sequence[PeriodicWindow]) -> list[tuple[float, float, float]]:
    """(base, period, shift) per edge progression: edge j = (base + j * period) + shift."""
    out: dict[tuple[float, float, float], None] = {}
    for w in windows:
        out[(w.offset, w.slide, 0.0)] = None
        if all(_is_dyadic(v) for v in (w.offset, w.slide, w.size)):
            phase = (Fraction(w.offset) + Fraction(w.size)) % Fraction(w.slide)
            out[(float(phase), w.slide, 0.0)] = None
        else:
            out[(w.offset, w.slide, w.size)] = None
    return list(out)


def _edges_around(ts: Numbers, base: Numbers, period: Numbers, shift: Numbers) -> tuple[np.ndarray, np.ndarray]:
    """Per (row of `ts`, progression): the largest edge <= ts and the smallest edge > ts."""
    j = np.floor((ts - base - shift) / period)
    edge = (base + j * period) + shift
    for _ in range(4):  # the float floor is off by at most one step; fix it exactly
        over = edge > ts
        if not over.any():
            break
        j = np.where(over, j - 1, j)
        edge = (base + j * period) + shift
    following = (base + (j + 1) * period) + shift
    for _ in range(4):
        under = following <= ts
        if not under.any():
            break
        j = np.where(under, j + 1, j)
        edge = np.where(under, following, edge)
        following = (base + (j + 1) * period) + shift
    return np.asarray(edge), np.asarray(following)


@dataclass(frozen=True, slots=True)
class _EdgeGrid:
    """Sorted edges that all lie on a grid of `step` ticks of 2**-20 s from `origin` (the usual
    windows of whole seconds, minutes, halves ...): the last edge at or below a time is then
    `last[(tick - origin) // step]`, integer arithmetic with no branch per row, where a binary
    search over many edges mispredicts at every level for rows out of order."""

    origin: int
    step: int
    last: np.ndarray  # per grid cell, the index of the last edge at or below its start

    @staticmethod
    def of(edges: np.ndarray) -> _EdgeGrid | None:
        """The grid of `edges`, if they are on one of at most a few cells per edge."""
        if len(edges) < 2 or not (abs(edges[0]) < _TICK_LIMIT and abs(edges[-1]) < _TICK_LIMIT):
            return None
        scaled = edges * _TICKS  # exact: a power of two
        ticks = scaled.astype(np.int64)
        if not np.array_equal(ticks, scaled):  # not on the 2**-20 s grid
            return None
        step = int(np.gcd.reduce(np.diff(ticks)))
        cells = (int(ticks[-1]) - int(ticks[0])) // step + 1
        if cells > _GRID_CELLS * len(edges):
            return None
        origin = int(ticks[0])
        last = ticks.searchsorted(origin + step * np.arange(cells, dtype=np.int64), side="right") - 1
        return _EdgeGrid(origin, step, last)

    def last_edges(self, ts: np.ndarray) -> np.ndarray:
        """Per time (not negative, within the edges), the index of the last edge at or below it:
        a time's tick is its floor in 2**-20 s (exact), and an edge at or below the time is at or
        below its tick, the edges being whole ticks."""
        cell = (ts * _TICKS).astype(np.int64)
        cell -= self.origin
        cell //= self.step
        found: np.ndarray = self.last[cell]
        return found


class SliceEdges:
    """Where slices start and end for a set of periodic queries (their union of boundaries).

    `slice_of` answers from a cached run of a few thousand consecutive edges (one binary search),
    rebuilt around a timestamp outside it: a record costs the same whatever the number of queries.
    The cache is a pure function of the queries, not state.
    """

    def __init__(self, windows: Sequence[PeriodicWindow]) -> None:
        self.windows = tuple(windows)
        self.progressions = _progressions(self.windows)
        base, period, shift = (np.array(column, dtype=np.float64) for column in zip(*self.progressions))
        self._base, self._period, self._shift = base, period, shift
        self._offset = np.array([w.offset for w in self.windows], dtype=np.float64)
        self._slide = np.array([w.slide for w in self.windows], dtype=np.float64)
        self._size = np.array([w.size for w in self.windows], dtype=np.float64)
        self.gapless = all(w.slide <= w.size for w in self.windows)  # every time is in some window
        self._span = _CACHED_EDGES / float((1.0 / period).sum())  # time holding that many edges
        self._cache = np.empty(0, dtype=np.float64)
        self._cache_list: list[float] | None = None  # the same, for `bisect` (made when asked)
        self._cache_lo = math.inf  # the cache answers for timestamps in [lo, hi)
        self._cache_hi = -math.inf
        self._grid: _EdgeGrid | None = None  # the cache's edges on a grid, if they are

    def _cached(self, t_min: float, t_max: float) -> np.ndarray | None:
        """Consecutive edges, complete around every time in `[t_min, t_max]`: the cache, moved
        there if needed (None if the span is too long for it, or the times too large)."""
        if not (self._cache_lo <= t_min and t_max < self._cache_hi):
            span = self._span
            if t_max - t_min >= span / 2:
                return None
            low, high = t_min - span / 4, t_min + span * 3 / 4
            edges = self._edges_between(low, high, limit=4 * _CACHED_EDGES)
            if edges is None:  # a timestamp too large for the float steps of the cache
                return None
            # complete between low and high only: each progression starts and stops elsewhere
            self._cache, self._cache_list = edges, None
            self._cache_lo, self._cache_hi = low, high
            self._grid = _EdgeGrid.of(edges)
        return self._cache

    def slice_of(self, ts: float) -> tuple[float, float]:
        """The slice `[start, end)` holding `ts`."""
        cache = self._cache_list
        if cache is None or not self._cache_lo <= ts < self._cache_hi:
            if self._cached(ts, ts) is None:
                return self._slice_by_arithmetic(ts)
            cache = self._cache_list = self._cache.tolist()
        i = bisect_right(cache, ts) - 1
        return cache[i], cache[i + 1]

    def _slice_by_arithmetic(self, ts: float) -> tuple[float, float]:
        lo, hi = _edges_around(np.float64(ts), self._base, self._period, self._shift)
        return float(lo.max()), float(hi.min())

    def _edges_between(self, t_min: float, t_max: float, limit: int) -> np.ndarray | None:
        """The sorted, distinct edges from one at or below `t_min` to one above `t_max` (None if
        there are more than `limit`)."""
        base, period, shift = self._base, self._period, self._shift
        j0 = np.floor((t_min - base - shift) / period) - 1
        j1 = np.floor((t_max - base - shift) / period) + 2
        counts = (j1 - j0 + 1).astype(np.int64)
        total = int(counts.sum())
        if total > limit:
            return None
        which = np.repeat(np.arange(len(base)), counts)
        first = np.cumsum(counts) - counts
        j = j0[which] + (np.arange(total) - first[which])
        edges: np.ndarray = np.unique((base[which] + j * period[which]) + shift[which])
        return edges

    def slices_of(self, ts: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Vectorized `slice_of` for a column of timestamps: (slice index per row, start per slice
        index, end per slice index).

        Enumerates the edges in the batch's time span once and binary-searches them; a batch
        spanning far more edges than it has rows is searched progression by progression over its
        distinct timestamps instead.
        """
        if not len(ts):
            return np.empty(0, dtype=np.int64), np.empty(0), np.empty(0)
        t_min, t_max = float(ts.min()), float(ts.max())
        edges = self._cached(t_min, t_max)
        if edges is None:
            edges = self._edges_between(t_min, t_max, limit=max(8 * len(ts), 1 << 16))
        if edges is not None:
            # each progression brings edges a period or two beyond the batch: keep the ones
            # around it, so the search per row runs over few (long periods, many queries)
            first = int(edges.searchsorted(t_min, side="right")) - 1
            last = int(edges.searchsorted(t_max, side="right"))
            grid = self._grid if edges is self._cache else None
            if grid is not None and t_min >= 0.0:
                index = grid.last_edges(ts)
                index -= first
            else:
                index = edges[first:last + 1].searchsorted(ts, side="right") - 1
            edges = edges[first:last + 1]
            return index, edges[:-1], edges[1:]
        distinct, inverse = np.unique(ts, return_inverse=True)
        lo = np.full(len(distinct), -np.inf)
        hi = np.full(len(distinct), np.inf)
        for b, p, s in self.progressions:
            edge, following = _edges_around(distinct, np.float64(b), np.float64(p), np.float64(s))
            np.maximum(lo, edge, out=lo)
            np.minimum(hi, following, out=hi)
        starts, first_of, index = np.unique(lo, return_index=True, return_inverse=True)
        return index.reshape(-1)[inverse.reshape(-1)], starts, hi[first_of]  # per distinct time, then per row

    def first_windows(self, t: float) -> tuple[list[int], list[float]]:
        """Per query, the first window ending after `t`: (index, end)."""
        if len(self.windows) <= _SCALAR_LIMIT:
            ks = [w.first_end_index(t) for w in self.windows]
            return ks, [w.end_of(k) for w, k in zip(self.windows, ks)]
        k = first_end_indices(np.float64(t), self._offset, self._slide, self._size)
        return k.astype(np.int64).tolist(), ((self._offset + k * self._slide) + self._size).tolist()

    def first_open_start(self, watermark: float, lateness: float) -> float:
        """The earliest start of a window, of any query, still open at `watermark`
        (`end + lateness > watermark`): slices before it are needed by no window."""
        if watermark == math.inf:
            return math.inf
        if len(self.windows) <= _SCALAR_LIMIT:
            best = math.inf
            for w in self.windows:
                k = w.first_end_index(watermark - lateness)
                while w.end_of(k - 1) + lateness > watermark:
                    k -= 1
                while w.end_of(k) + lateness <= watermark:
                    k += 1
                best = min(best, w.start_of(k))
            return best
        offset, slide, size = self._offset, self._slide, self._size
        index = first_end_indices(np.float64(watermark - lateness), offset, slide, size)
        for _ in range(4):  # exactly: the first index with end + lateness > watermark
            back = ((offset + (index - 1) * slide) + size) + lateness > watermark
            if not back.any():
                break
            index = np.where(back, index - 1, index)
        for _ in range(4):
            ahead = ((offset + index * slide) + size) + lateness <= watermark
            if not ahead.any():
                break
            index = np.where(ahead, index + 1, index)
        return float((offset + index * slide).min())

    def next_end(self, start: float, after: float) -> float:
        """The earliest end, after `after`, of a window holding the slice starting at `start`
        (inf if none: the slice lies in no such window)."""
        t = start if start > after else after
        if len(self.windows) > _SCALAR_LIMIT:
            index = first_end_indices(np.float64(t), self._offset, self._slide, self._size)
            starts = self._offset + index * self._slide
            ends = np.where(starts <= start, starts + self._size, np.inf)
            return float(ends.min())
        best = math.inf
        for w in self.windows:
            k = w.first_end_index(t)
            if w.start_of(k) <= start:
                end = w.end_of(k)
                if end < best:
                    best = end
        return best


def first_end_indices(t: Numbers, offset: Numbers, slide: Numbers, size: Numbers) -> np.ndarray:
    """Vectorized `first_end_index`: the smallest k with (offset + k * slide) + size > t."""
    k = np.floor((t - offset - size) / slide) + 1
    for _ in range(4):
        back = ((offset + (k - 1) * slide) + size) > t
        if not np.any(back):
            break
        k = np.where(back, k - 1, k)
    for _ in range(4):
        ahead = ((offset + k * slide) + size) <= t
        if not np.any(ahead):
            break
        k = np.where(ahead, k + 1, k)
    return np.asarray(k)
