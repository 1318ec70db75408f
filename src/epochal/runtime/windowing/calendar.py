"""The windows of an operator's periodic queries in firing order, over a span of event time.

A slice table fires at every watermark; what it needs each time is arithmetic on the queries
alone: the windows ending since the last firing, in (end, start, query) order; the earliest end
still to come (when to fire next); the earliest start of a window still open for late records
(which slices to purge, Cutty's `store.purge`, dissertation §5.5.2, Algorithm 8). Computed per
query at every firing, this cost grew with the number of queries. A `WindowCalendar` enumerates
every window ending in a span holding a few thousand windows once, sorted, and answers each of
these with a binary search until the watermark leaves the span (then it moves on).

Boundaries use the float expressions of `epochal.plan.windows` (`start = offset + k * slide`,
`end = start + size`), so answers equal the per-query arithmetic exactly. The calendar is a pure
function of the queries and the allowed lateness: a cache, never state.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from ...plan.windows import PeriodicWindow
from .edges import SliceEdges, first_end_indices

_WINDOWS = 4096  # windows a calendar holds, about
_MOST_WINDOWS = 1 << 18  # a calendar reaching back by the allowed lateness holds at most this many


class WindowCalendar:
    """Every window ending in `(lo, hi]`, sorted by (end, start, query); rebuilt on demand.

    `start[i]`, `end[i]`, `query[i]` describe window `i`; `closes[i]` is `end + lateness` (when
    it stops taking late records) and `min_start[i]` the smallest start from `i` on.
    """

    def __init__(self, windows: Sequence[PeriodicWindow], lateness: float, edges: SliceEdges) -> None:
        self.edges = edges
        self.lateness = lateness
        self.offset = np.array([w.offset for w in windows], dtype=np.float64)
        self.slide = np.array([w.slide for w in windows], dtype=np.float64)
        self.size = np.array([w.size for w in windows], dtype=np.float64)
        self.max_size = float(self.size.max())
        self.max_slide = float(self.slide.max())
        rate = float((1.0 / self.slide).sum())  # windows ending per second, all queries together
        self.span = max(_WINDOWS / rate, min(4 * self.max_slide, 4 * _WINDOWS / rate))
        self.rate = rate
        self.lo = math.inf
        self.hi = -math.inf
        empty = np.empty(0, dtype=np.float64)
        self.start, self.end, self.closes, self.min_start = empty, empty, empty, empty
        self.query = np.empty(0, dtype=np.int64)
        self.open_until = -math.inf  # `first_open_start(w)` is answered here for w below this

    # -- queries ---------------------------------------------------------------------------------

    def ending_between(self, t0: float, t1: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(query, start, end) of the windows ending in `(t0, t1]` (finite), by (end, start, query)."""
        if not (self.lo <= t0 and t1 <= self.hi):
            self._cover(t0, t1)
        end = self.end
        i = int(end.searchsorted(t0, side="right"))
        j = int(end.searchsorted(t1, side="right"))
        return self.query[i:j], self.start[i:j], end[i:j]

    def first_end_after(self, t: float) -> float:
        """The earliest end, over queries, of a window ending after `t` (`t` itself if not finite)."""
        if not math.isfinite(t):
            return t
        if not (self.lo <= t and len(self.end) and float(self.end[-1]) > t):
            self._cover(t, t)
            if not (len(self.end) and float(self.end[-1]) > t):  # no query ends a window in the span
                k = first_end_indices(np.float64(t), self.offset, self.slide, self.size)
                return float(((self.offset + k * self.slide) + self.size).min())
        end = self.end
        return float(end[int(end.searchsorted(t, side="right"))])

    def first_open_start(self, watermark: float) -> float:
        """The earliest start of a window, of any query, still open at `watermark`
        (`end + lateness > watermark`): slices before it are needed by no window."""
        if not math.isfinite(watermark):
            return self.edges.first_open_start(watermark, self.lateness)
        if not self._answers_open(watermark):
            self._cover(watermark, watermark)
            if not self._answers_open(watermark):  # a query with no window in the span
                return self.edges.first_open_start(watermark, self.lateness)
        return float(self.min_start[int(self.closes.searchsorted(watermark, side="right"))])

    def _answers_open(self, watermark: float) -> bool:
        """Every window open at `watermark` ends after `lo`, and each query has one here."""
        return self.lo + self.lateness <= watermark < self.open_until

    # -- building --------------------------------------------------------------------------------

    def _cover(self, t0: float, t1: float) -> None:
        """Enumerate the windows ending in `(lo, hi]`: `lo` a slide before `t0` and, when that
        stays small, the allowed lateness more (so the windows still open at `t0` are here);
        `hi` a span after `t0`, or `t1` if later."""
        back = self.max_slide + self.lateness
        if back * self.rate > _MOST_WINDOWS:
            back = self.max_slide
        lo = t0 - back
        hi = max(t1, t0 + self.span)
        offset, slide, size = self.offset, self.slide, self.size
        first = first_end_indices(np.float64(lo), offset, slide, size).astype(np.int64)
        past = first_end_indices(np.float64(hi), offset, slide, size).astype(np.int64)
        count = np.maximum(past - first, 0)
        total = int(count.sum())
        query = np.repeat(np.arange(len(offset)), count)
        k = first[query] + (np.arange(total) - np.repeat(np.cumsum(count) - count, count))
        start = offset[query] + k.astype(np.float64) * slide[query]
        end = start + size[query]
        order = np.lexsort((query, start, end))
        self.query, self.start, self.end = query[order], start[order], end[order]
        self.closes = self.end + self.lateness
        self.min_start = np.minimum.accumulate(self.start[::-1])[::-1] if total else self.start
        self.lo, self.hi = lo, hi
        if bool((count > 0).all()):  # each query's last window here: the span answers below its close
            last_end = (offset + (past - 1).astype(np.float64) * slide) + size
            self.open_until = float((last_end + self.lateness).min())
        else:
            self.open_until = -math.inf
