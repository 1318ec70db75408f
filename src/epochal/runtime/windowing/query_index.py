"""Window index arithmetic of a table's periodic queries, vectorized over queries.

Firing a slice table enumerates due windows per query by arithmetic, once for all keys: the
windows ending in a span (`first_end`), and, when late records changed cells, the complete
windows still open for late records (`last_start`, `windows`), which fire again (dissertation
§5.5.2, Algorithm 8, with Scotty's re-firing of the windows a late record changed, `grid`).
The float expressions are those of `plan.windows`, so boundaries compare exactly.
"""

from __future__ import annotations

import math

import numpy as np

from ...plan.windows import PeriodicWindow
from .edges import first_end_indices

_SCALAR_LIMIT = 12  # up to this many queries, index arithmetic runs per query in Python


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
