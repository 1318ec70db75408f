"""The window join on shared slices: pairs of equal keys in the same tumbling or sliding window.

Flink's window join (`JoinedStreams`) is a window operator over the union of both inputs: each
record is put into every window it belongs to, so with windows of size `n * slide` it is kept
`n` times, and a window's join is computed from its own copies. Here a key's records are kept
once, in the slice of the windows' shared slicing that holds them (dissertation §5.3.1: slices
are cut at every window start and end, `windowing.edges`), each slice holding both sides'
records of its time span; a window's join pairs the left records of its slices with the right
records of its slices. State is one entry per key (`WindowJoinState`), so both sides move,
restore and rescale with the key's group.

Firing follows the window operator's contract: one event-time timer per key, at the end of its
earliest window with records that has not fired, or at the time its oldest slice can go; when
the watermark reaches a window's end, its pairs are emitted (and, for a left outer join, each of
its left records with no right record in the window, paired with None). A slice goes once every
window holding it has ended `allowed_lateness` before the watermark.

Late records: a record behind the watermark still joins the windows that are open for it
(`end + allowed_lateness > watermark`): with the records already there, for the windows that
fired (their earlier pairs stand; the new ones are added, not the window's whole join again as
a re-firing Flink window would), and with the rest when the others fire. A record that belongs
to a window closed for it goes to the late side output (`plan.two_inputs.LATE_TAGS`), even if
other windows took it: every pair it misses is accounted for. An outer join takes no allowed
lateness: a late right record could not take back an unmatched left record already emitted; nor
does a semi join (each left record once per window: a late right record would need to know
which left records were emitted). A semi join emits each left record with a right record in the
window once per window.
A record in no window at all (a sampling gap, `slide > size`) joins nothing and is not late.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from typing import Any

from ...plan.two_inputs import JoinType, WindowJoinSpec
from ..windowing.edges import SliceEdges
from .join_io import JoinOperator, SideBatch

_STATE = "__window_join__"


class WindowJoinState:
    """One key's slices, sorted by start: per slice its end and both sides' `(time, record)`s;
    `fired`: the watermark up to which the key's windows have fired."""

    __slots__ = ("starts", "ends", "lefts", "rights", "fired", "timer")

    def __init__(self) -> None:
        self.starts: list[float] = []
        self.ends: list[float] = []
        self.lefts: list[list[tuple[float, Any]]] = []
        self.rights: list[list[tuple[float, Any]]] = []
        self.fired = -math.inf
        self.timer = math.inf

    def __deepcopy__(self, memo: dict[int, Any]) -> WindowJoinState:
        """The copy copy-on-write takes: the slices' lists, not the records."""
        out = WindowJoinState()
        out.starts, out.ends = list(self.starts), list(self.ends)
        out.lefts, out.rights = [list(x) for x in self.lefts], [list(x) for x in self.rights]
        out.fired, out.timer = self.fired, self.timer
        return out

    def __getstate__(self) -> tuple[Any, ...]:
        return (self.starts, self.ends, self.lefts, self.rights, self.fired, self.timer)

    def __setstate__(self, state: tuple[Any, ...]) -> None:
        self.starts, self.ends, self.lefts, self.rights, self.fired, self.timer = state

    def rows(self) -> int:
        return sum(len(x) for x in self.lefts) + sum(len(x) for x in self.rights)


class WindowJoinOperator(JoinOperator):
    """`WindowJoinSpec` at run time: one `WindowJoinState` and one event-time timer per key."""

    def __init__(self, spec: WindowJoinSpec) -> None:
        super().__init__(spec)
        self.window = spec.window
        self.lateness = spec.allowed_lateness
        self.outer = spec.output.how is JoinType.LEFT
        self.edges = SliceEdges([spec.window])
        self._slices: dict[float, tuple[float, float, int, int]] = {}
        self._last: tuple[float, float, int, int] | None = None

    # -- records -------------------------------------------------------------------------------
    def _slice_of(self, t: float) -> tuple[float, float, int, int]:
        """`(start, end, first window, last window)` of the slice holding `t` (cached: records
        come in runs of one slice; the windows of a slice are those of any time in it)."""
        cached = self._last
        if cached is not None and cached[0] <= t < cached[1]:
            return cached
        lo, hi = self.edges.slice_of(t)
        found = self._slices.get(lo)
        if found is None:
            if len(self._slices) > 4096:
                self._slices.clear()
            window = self.window
            found = self._slices[lo] = (lo, hi, window.first_end_index(lo), window.last_start_index(lo))
        self._last = found
        return found

    def on_side(self, batch: SideBatch, side: int, out: list[Any]) -> list[Any]:
        backend, window, watermark, lateness = self.backend, self.window, self.watermark, self.lateness
        for record, key, group, t in zip(batch.records, batch.keys, batch.groups, batch.times):
            lo, hi, first, last = self._slice_of(t)
            if first > last:
                continue  # a sampling gap: in no window
            if window.end_of(first) + lateness <= watermark:  # the earliest window is closed for it
                self.late(side, record)
                if window.end_of(last) + lateness <= watermark:
                    continue
            backend.set_current_key(key, group)
            state = backend.get_mutable(_STATE, WindowJoinState)
            if watermark > state.fired:  # every timer up to the watermark has fired
                state.fired = watermark
            i = self._slice(state, lo, hi)
            (state.lefts if side == 0 else state.rights)[i].append((t, record))
            if window.end_of(first) <= state.fired:  # windows that fired already: the new pairs now
                for k in range(first, last + 1):
                    end = window.end_of(k)
                    if end > state.fired:
                        break
                    if end + lateness > watermark:
                        self._pair_one(state, k, side, t, record, key, out)
            # the key's timer: its earliest time so far, or this slice's, if earlier (O(1) a record)
            due = self._due(lo, state.fired)
            if due < state.timer:
                before, state.timer = state.timer, due
                self.retime(before, due)
        return out

    @staticmethod
    def _slice(state: WindowJoinState, lo: float, hi: float) -> int:
        """The index of the key's slice `[lo, hi)`, added if the key has none there yet."""
        starts = state.starts
        i = len(starts) - 1  # most records go to the key's newest slice
        if i < 0 or starts[i] != lo:
            i = bisect_left(starts, lo)
            if i == len(starts) or starts[i] != lo:
                starts.insert(i, lo)
                state.ends.insert(i, hi)
                state.lefts.insert(i, [])
                state.rights.insert(i, [])
        return i

    def _pair_one(self, state: WindowJoinState, k: int, side: int, t: float, record: Any, key: Any,
                  out: list[Any]) -> None:
        """A late record's pairs in window `k`, which has fired already."""
        start, end = self.window.start_of(k), self.window.end_of(k)
        self.jctx.window = (start, end)
        others = state.rights if side == 0 else state.lefts
        if self.semi:  # a late left record (semi joins take no lateness but a late left's own)
            if any(others[i] for i in range(bisect_left(state.starts, start), bisect_left(state.starts, end))):
                self.emit_semi(record, out, key, t)
            return
        for i in range(bisect_left(state.starts, start), bisect_left(state.starts, end)):
            for ot, other in others[i]:
                if side == 0:
                    self.emit(record, other, out, key, t, ot)
                else:
                    self.emit(other, record, out, key, ot, t)

    # -- firing --------------------------------------------------------------------------------
    def on_timer(self, key: Any, watermark: float, out: list[Any]) -> None:
        backend, window = self.backend, self.window
        state = backend.get_mutable(_STATE, WindowJoinState)
        state.timer = math.inf  # it fired: no longer registered
        due: set[int] = set()
        for lo in state.starts:
            _, _, first, last = self._slice_of(lo)
            if window.end_of(first) > watermark:
                break  # this slice's windows, and every later slice's, end after the watermark
            for k in range(first, last + 1):
                if state.fired < window.end_of(k) <= watermark:
                    due.add(k)
        for k in sorted(due):
            self._fire(state, k, key, out)
        state.fired = max(state.fired, watermark)
        n = 0  # slices every window of which is closed: a prefix, as the last window's end grows with lo
        while n < len(state.starts) and self._closing(state.starts[n]) <= watermark:
            n += 1
        if n:
            del state.starts[:n], state.ends[:n], state.lefts[:n], state.rights[:n]
        if not state.starts:
            backend.delete(_STATE)
            return
        self._retime(state)

    def _fire(self, state: WindowJoinState, k: int, key: Any, out: list[Any]) -> None:
        start, end = self.window.start_of(k), self.window.end_of(k)
        self.jctx.window = (start, end)
        i0, i1 = bisect_left(state.starts, start), bisect_left(state.starts, end)
        lefts = [x for i in range(i0, i1) for x in state.lefts[i]]
        rights = [x for i in range(i0, i1) for x in state.rights[i]]
        emit = self.emit
        if rights and self.semi:
            for lt, left in lefts:
                self.emit_semi(left, out, key, lt)
        elif rights:
            for lt, left in lefts:
                for rt, right in rights:
                    emit(left, right, out, key, lt, rt)
        elif self.outer:
            for lt, left in lefts:
                emit(left, None, out, key, lt, None)

    def _closing(self, lo: float) -> float:
        """When the slice starting at `lo` can go: its last window is closed for every record."""
        return self.window.end_of(self._slice_of(lo)[3]) + self.lateness

    def _due(self, lo: float, fired: float) -> float:
        """When the slice starting at `lo` is next due: the end of its first window that has not
        fired, or its closing."""
        window = self.window
        _, _, first, last = self._slice_of(lo)
        closing = window.end_of(last) + self.lateness
        k = first
        if math.isfinite(fired) and window.end_of(k) <= fired:
            k = max(k, window.first_end_index(fired))
        return min(window.end_of(k), closing) if k <= last else closing

    def _retime(self, state: WindowJoinState) -> None:
        """Keep the key's timer at its earliest unfired window end or slice closing (after a
        firing). A slice is due after its start, so the slices from the first one starting at or
        after the best time so far need no look: usually the first slice decides."""
        best = math.inf
        for lo in state.starts:
            if lo >= best:
                break
            best = min(best, self._due(lo, state.fired))
        before, state.timer = state.timer, best
        self.retime(before, best)


__all__ = ["WindowJoinOperator", "WindowJoinState"]
