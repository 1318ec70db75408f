"""Periodic queries on shared slices: one partial per (key, slice), windows combined from slices.

The slices of all periodic queries of an operator are cut at the union of their window
boundaries (`SliceEdges`), so each record updates exactly one partial, whatever the number of
overlapping windows and queries (dissertation §5.3.1; §5.4.3 for many queries on one stream).
Windows are evaluated when the watermark passes their end, as in Cutty's aggregator (§5.5.2,
Algorithm 8: a window's result is `lookup(start) ⊕ partial` over the slices it covers), with two
departures for out-of-order streams, after Scotty's slicing: a record behind the watermark
updates the slice it belongs to (creating it if needed), and the windows it changed fire again;
and slice edges include window ends, so a slice never straddles the end of a window.

Lookups (Algorithm 8's `store.lookup(from, to)`): invertible aggregates (count, sum) take prefix
sums over a key's live slices once per firing, shared by every query, so a window costs two binary
searches and one subtraction whatever its length (n slices: O(n) per firing plus O(log n) per
window). Associative ones (min, max, reduce, aggregate) keep a `WindowCursor` per query, a two-stack
queue over the slices (O(1) amortised combines per slice entering or leaving a window, against the
O(log n) per lookup of Cutty's eager FlatFAT store, §5.5.4). `Process` windows concatenate their
slices' records. Late updates recombine the window's slices directly, O(slices in the window).
Purging (Algorithm 8's `store.purge`) drops the slices before the earliest window any query can
still need: `end + allowed_lateness > watermark`.
"""

from __future__ import annotations

import math
from bisect import bisect_left, bisect_right
from collections.abc import Sequence
from itertools import accumulate
from typing import Any

from ...plan.windows import PeriodicWindow
from .aggregates import Combining, WindowAggregate, combine_all
from .edges import SliceEdges
from .store import FiredWindow, Firing, SliceStore, WindowCursor


class Grid:
    """The periodic queries of one operator and the code that runs them over `SliceStore`s."""

    def __init__(
        self, names: Sequence[str], windows: Sequence[PeriodicWindow], aggregate: WindowAggregate, lateness: float
    ) -> None:
        self.names = tuple(names)
        self.windows = tuple(windows)
        self.edges = SliceEdges(self.windows)
        self.aggregate = aggregate
        self.lateness = lateness
        self.invertible = aggregate.combining is Combining.INVERTIBLE
        self.keep_records = aggregate.combining is Combining.KEEP_RECORDS

    # -- adding ------------------------------------------------------------------------------

    def add_on_time(self, store: SliceStore, ts: float, item: Any) -> None:
        """A record at or after the watermark, outside the cached slice."""
        starts = store.starts
        i = bisect_right(starts, ts) - 1
        if i >= 0 and ts < store.ends[i]:
            lo = starts[i]
            store.lo, store.hi = lo, store.ends[i]
            store.partials[lo] = self.aggregate.fold(store.partials[lo], item)
            return
        lo, hi = self.edges.slice_of(ts)
        if store.next_fire <= lo and self.edges.gapless:  # an earlier window fires first anyway
            self._insert(store, i + 1, lo, hi, self.aggregate.lift(item))
            store.lo, store.hi = lo, hi
            return
        end = self.edges.next_end(lo, store.fired)
        if end == math.inf:  # a sampling gap: in no window
            return
        self._insert(store, i + 1, lo, hi, self.aggregate.lift(item))
        store.lo, store.hi = lo, hi
        if end < store.next_fire:
            store.next_fire = end

    def add_partial(self, store: SliceStore, lo: float, hi: float, partial: Any) -> None:
        """The columnar path: a batch's partial of one slice of this key (rows on time)."""
        partials = store.partials
        if lo in partials:
            partials[lo] = self.aggregate.merge(partials[lo], partial)
            return
        if store.next_fire <= lo and self.edges.gapless:
            self._insert(store, bisect_left(store.starts, lo), lo, hi, partial)
            return
        end = self.edges.next_end(lo, store.fired)
        if end == math.inf:
            return
        self._insert(store, bisect_left(store.starts, lo), lo, hi, partial)
        if end < store.next_fire:
            store.next_fire = end

    def add_behind(self, store: SliceStore, ts: float, item: Any, watermark: float) -> tuple[bool, list[int]]:
        """A record behind the watermark (`store.fired` is the watermark): whether some query
        counts it, and the queries it is too late for (every window of theirs holding it ended
        `allowed_lateness` or more before the watermark)."""
        lateness, fired = self.lateness, store.fired
        accepted = False
        late = []
        for q, w in enumerate(self.windows):
            k = w.last_start_index(ts)
            end = w.end_of(k)
            if end <= ts:
                continue  # a sampling gap: in no window of this query
            if end + lateness <= watermark:
                late.append(q)
                continue
            accepted = True
            while end > ts:  # the windows holding ts, newest first; complete ones fire again
                if end <= fired and end + lateness > watermark:
                    store.refires.add((q, k))
                k -= 1
                end = w.end_of(k)
        if not accepted:
            return False, late
        starts, partials = store.starts, store.partials
        i = bisect_right(starts, ts) - 1
        if i >= 0 and ts < store.ends[i]:
            lo = starts[i]
            partials[lo] = self.aggregate.fold(partials[lo], item)
        else:
            lo, hi = self.edges.slice_of(ts)
            self._insert(store, i + 1, lo, hi, self.aggregate.lift(item))
            store.next_fire = min(store.next_fire, self.edges.next_end(lo, fired))
        for q, cursor in enumerate(store.cursors):  # a two-stack queue cannot change a middle slice
            if cursor is not None and cursor.lo <= lo < cursor.hi:
                store.cursors[q] = None
        if store.refires:
            store.next_fire = min(store.next_fire, fired)
        return True, late

    def late_queries(self, ts: float, watermark: float) -> list[int]:
        """The queries a record at `ts` would be too late for at `watermark`."""
        out = []
        for q, w in enumerate(self.windows):
            end = w.end_of(w.last_start_index(ts))
            if ts < end and end + self.lateness <= watermark:
                out.append(q)
        return out

    def _insert(self, store: SliceStore, i: int, lo: float, hi: float, partial: Any) -> None:
        store.starts.insert(i, lo)
        store.ends.insert(i, hi)
        store.partials[lo] = partial

    # -- firing ------------------------------------------------------------------------------

    def fire(self, store: SliceStore, watermark: float, previous: float, out: list[FiredWindow]) -> None:
        """Emit windows changed by late records, then those ending in `(previous, watermark]`,
        oldest first per query; then purge the slices no window can need any more."""
        if len(store.cursors) != len(self.windows):
            store.cursors = [None] * len(self.windows)
        result = self.aggregate.result
        if store.refires:
            for q, k in sorted(store.refires):
                w = self.windows[q]
                start, end = w.start_of(k), w.end_of(k)
                partial = self._combine(store, start, end)
                if partial is not None:
                    out.append(FiredWindow(self.names[q], start, end, result(partial), Firing.LATE_UPDATE))
            store.refires.clear()
        if store.starts:
            ks, ends = self.edges.first_windows(max(previous, store.starts[0]))
            prefix: list[Any] | None = None
            for q, (k, end) in enumerate(zip(ks, ends)):
                if end <= watermark:
                    if prefix is None and self.invertible:
                        prefix = self._prefix(store)
                    self._fire_query(store, q, k, watermark, prefix, out)
        self._purge(store, watermark)

    def _prefix(self, store: SliceStore) -> list[Any]:
        """prefix[i]: the partials of the first i live slices combined (invertible aggregates)."""
        partials = store.partials
        return list(accumulate((partials[s] for s in store.starts), self.aggregate.merge_function,
                               initial=self.aggregate.identity()))

    def _fire_query(self, store: SliceStore, q: int, k: int, watermark: float, prefix: list[Any] | None,
                    out: list[FiredWindow]) -> None:
        """Emit the windows of query `q` from window `k` on that end by `watermark` and hold slices."""
        w, name, starts = self.windows[q], self.names[q], store.starts
        result, subtract = self.aggregate.result, self.aggregate.subtract
        while True:
            start, end = w.start_of(k), w.end_of(k)
            if end > watermark:
                return
            i = bisect_left(starts, start)
            if i == len(starts):
                return
            if starts[i] >= end:  # no slice in window k: go to the first window holding the next one
                k = max(k + 1, w.first_end_index(starts[i]))
                continue
            if prefix is not None:
                partial = subtract(prefix[bisect_left(starts, end, i)], prefix[i])
            else:
                partial = self._window(store, q, start, end)
            out.append(FiredWindow(name, start, end, result(partial), Firing.ON_TIME))
            k += 1

    def peek(self, store: SliceStore, watermark: float, out: list[FiredWindow]) -> None:
        """The partial results of the windows not complete at `watermark` that hold a slice
        (early firings); the store is left as it is."""
        result, done = self.aggregate.result, max(watermark, store.fired)
        for q, w in enumerate(self.windows):
            seen: set[float] = set()
            for s in store.starts:
                for start, end in w.windows_containing(s):
                    if end > done and start not in seen:
                        seen.add(start)
                        partial = self._combine(store, start, end)
                        if partial is not None:
                            out.append(FiredWindow(self.names[q], start, end, result(partial), Firing.EARLY))

    def window_result(self, store: SliceStore, q: int, start: float, end: float, firing: Firing) -> FiredWindow | None:
        """Window `[start, end)` of query `q` as it stands (None: no slice in it)."""
        partial = self._combine(store, start, end)
        return None if partial is None else FiredWindow(self.names[q], start, end, self.aggregate.result(partial),
                                                        firing)

    def empty_window(self, store: SliceStore, start: float, end: float) -> None:
        """Drop the slices in `[start, end)` (a purging trigger's firing: one tumbling query, whose
        slices no other window shares)."""
        starts = store.starts
        i, j = bisect_left(starts, start), bisect_left(starts, end)
        if i == j:
            return
        for s in starts[i:j]:
            del store.partials[s]
        del starts[i:j], store.ends[i:j]
        store.cursors = [None] * len(store.cursors)
        store.lo, store.hi = math.inf, -math.inf

    def next_fire(self, store: SliceStore) -> float:
        """The watermark at which `store` has a window to emit next (inf: none)."""
        best = store.fired if store.refires else math.inf
        starts = store.starts
        if not starts:
            return best
        ks, ends = self.edges.first_windows(max(store.fired, starts[0]))
        for end, q, k in sorted(zip(ends, range(len(ks)), ks)):
            if end >= best:
                break
            w = self.windows[q]
            while True:  # the first window from k holding a slice
                start, end = w.start_of(k), w.end_of(k)
                if end >= best:
                    break
                i = bisect_left(starts, start)
                if i == len(starts):
                    break
                if starts[i] >= end:
                    k = max(k + 1, w.first_end_index(starts[i]))
                    continue
                best = end
                break
        return best

    def _combine(self, store: SliceStore, start: float, end: float) -> Any:
        """The partials of the slices in `[start, end)` combined (None: no slice there)."""
        starts, partials = store.starts, store.partials
        chosen = starts[bisect_left(starts, start):bisect_left(starts, end)]
        if self.keep_records:
            return [item for s in chosen for item in partials[s]] if chosen else None
        return combine_all(self.aggregate, [partials[s] for s in chosen])

    def _window(self, store: SliceStore, q: int, start: float, end: float) -> Any:
        """The combined partial of window `[start, end)` of query `q`, by its cursor (associative
        aggregates) or by combining its slices (`Process`)."""
        if self.keep_records:
            return self._combine(store, start, end)
        cursor = store.cursors[q]
        if cursor is None or start >= cursor.hi or start < cursor.lo:
            cursor = WindowCursor(start, start)
            store.cursors[q] = cursor
        self._advance_lo(store, cursor, start)
        self._advance_hi(store, cursor, end)
        front = cursor.front[-1][1] if cursor.front else None
        back = cursor.back_partial
        if front is None:
            return back
        return front if back is None else self.aggregate.merge(front, back)

    def _advance_lo(self, store: SliceStore, cursor: WindowCursor, lo: float) -> None:
        """Drop the slices before `lo` from the cursor."""
        if lo <= cursor.lo:
            return
        merge, partials, front = self.aggregate.merge, store.partials, cursor.front
        while True:
            if not front:
                if not cursor.back:
                    break
                acc = None
                for s in reversed(cursor.back):  # flip: suffix combinations, earliest on top
                    acc = partials[s] if acc is None else merge(partials[s], acc)
                    front.append((s, acc))
                cursor.back.clear()
                cursor.back_partial = None
            if front[-1][0] < lo:
                front.pop()
            else:
                break
        cursor.lo = lo
        if cursor.hi < lo:
            cursor.hi = lo

    def _advance_hi(self, store: SliceStore, cursor: WindowCursor, hi: float) -> None:
        """Add the slices in `[cursor.hi, hi)` to the cursor."""
        if hi <= cursor.hi:
            return
        starts, partials, merge = store.starts, store.partials, self.aggregate.merge
        acc = cursor.back_partial
        for s in starts[bisect_left(starts, cursor.hi):bisect_left(starts, hi)]:
            cursor.back.append(s)
            acc = partials[s] if acc is None else merge(acc, partials[s])
        cursor.back_partial = acc
        cursor.hi = hi

    def _purge(self, store: SliceStore, watermark: float) -> None:
        """Free the slices before the earliest window still open for late records."""
        first_needed = self.edges.first_open_start(watermark, self.lateness)
        starts = store.starts
        n = bisect_left(starts, first_needed)
        if not n:
            return
        for q, cursor in enumerate(store.cursors):
            if cursor is not None and cursor.lo < first_needed:
                if cursor.hi <= first_needed:
                    store.cursors[q] = None
                else:
                    self._advance_lo(store, cursor, first_needed)
        partials = store.partials
        for s in starts[:n]:
            del partials[s]
        del starts[:n]
        del store.ends[:n]
        if store.lo < first_needed:
            store.lo, store.hi = math.inf, -math.inf
