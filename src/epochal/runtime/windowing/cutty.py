"""User-defined deterministic windows on shared slices: Cutty (dissertation §5.4–§5.5).

The shared discretizer (§5.5.1) asks every `DeterministicWindow` of the operator, per record, how
many windows begin and end there; the shared aggregator (§5.5.2, Algorithm 8) keeps one active
partial, cuts a slice where any window begins, and evaluates an ending window by combining the
stored slices from its first one with the active partial; slices before the earliest window still
needed are purged. Window functions are sequential, so they need records in event-time order:
records wait in a buffer until the watermark passes them (they can arrive out of order within the
watermark's delay), then run in (time, arrival) order.

Departures from Algorithm 8, for lateness: a slice is also cut where a window ends (so an ended
window is a range of whole slices), and ended windows are kept until `end + allowed_lateness`
passes the watermark. A record behind the watermark never reaches the window functions (their
decisions are final): it joins the slice its time falls in, if some open window's time span
(`[start, end)`, or from the start on for a window not yet ended) holds it, and the ended windows
it changed fire again; otherwise it is late for that query. Lookups combine the window's slices
(Cutty's lazy store: O(1) add and purge, O(slices) lookup).
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections.abc import Sequence
from operator import itemgetter
from typing import Any

from ...plan.windows import DeterministicWindow
from .aggregates import Combining, WindowAggregate, combine_all
from .store import CuttyState, EndedWindow, FiredWindow, Firing

_TIME = itemgetter(0)


class Cutty:
    """The user-defined windows of one operator, run over the `CuttyState` of a key."""

    def __init__(self, names: Sequence[str], windows: Sequence[DeterministicWindow[Any]],
                 aggregate: WindowAggregate, lateness: float) -> None:
        self.names = tuple(names)
        self.windows = tuple(windows)
        self.aggregate = aggregate
        self.lateness = lateness
        self.keep_records = aggregate.combining is Combining.KEEP_RECORDS

    def new_state(self) -> CuttyState:
        return CuttyState(states=[w.initial_state() for w in self.windows], active=[[] for _ in self.windows])

    def is_empty(self, state: CuttyState) -> bool:
        """Nothing buffered, no window open, and every window function back at its initial state."""
        return (not state.staged and not state.ended and not any(state.active)
                and all(s == w.initial_state() for s, w in zip(state.states, self.windows)))

    def stage(self, state: CuttyState, ts: float, value: Any) -> float:
        """Buffer a record at or after the watermark; returns the watermark that processes it."""
        state.staged.append((ts, value))
        if ts < state.staged_min:
            state.staged_min = ts
        return math.nextafter(ts, math.inf)

    def add_behind(self, state: CuttyState, ts: float, item: Any, watermark: float) -> tuple[bool, bool, list[int]]:
        """A record behind the watermark: (counted, changed an ended window, late queries)."""
        holding = self._holding(state, ts, watermark)
        late = [q for q, windows in enumerate(holding) if windows is None]
        if len(late) == len(self.windows):
            return False, False, late
        changed = False
        for windows in holding:
            for ended in windows or ():
                ended.changed = True
                changed = True
        i = bisect_right(state.slice_starts, ts) - 1
        partial = state.slice_partials[i]
        state.slice_partials[i] = self.aggregate.lift(item) if partial is None else self.aggregate.fold(partial, item)
        return True, changed, late

    def late_queries(self, state: CuttyState, ts: float, watermark: float) -> list[int]:
        return [q for q, windows in enumerate(self._holding(state, ts, watermark)) if windows is None]

    def _holding(self, state: CuttyState, ts: float, watermark: float) -> list[list[EndedWindow] | None]:
        """Per query: the open ended windows whose span holds `ts` ([] if only a window still
        running holds it), or None if no open window does."""
        out: list[list[EndedWindow] | None] = []
        for q, active in enumerate(state.active):
            ended = [e for e in state.ended
                     if e.query == q and e.start <= ts < e.end and e.end + self.lateness > watermark]
            running = bool(active) and state.slice_starts[active[0] - state.base] <= ts
            out.append(ended if ended or running else None)
        return out

    def fire(self, state: CuttyState, watermark: float, out: list[FiredWindow]) -> None:
        """Emit changed ended windows, run the buffered records the watermark has passed through
        the window functions (emitting the windows they end), then purge."""
        result = self.aggregate.result
        for ended in state.ended:
            if ended.changed:
                partial = self._combine(state, ended.first_slice, ended.end_slice)
                out.append(FiredWindow(self.names[ended.query], ended.start, ended.end, result(partial),
                                       Firing.LATE_UPDATE))
                ended.changed = False
        if state.staged_min < watermark:
            ready = [r for r in state.staged if r[0] < watermark]
            state.staged = [r for r in state.staged if r[0] >= watermark]
            state.staged_min = min((r[0] for r in state.staged), default=math.inf)
            ready.sort(key=_TIME)  # stable: equal times keep their arrival order
            for ts, value in ready:
                self._discretize(state, ts, value, (ts, value) if self.keep_records else value, out)
        lateness = self.lateness
        state.ended = [e for e in state.ended if e.end + lateness > watermark]
        self._purge(state)

    def _discretize(self, state: CuttyState, ts: float, value: Any, item: Any, out: list[FiredWindow]) -> None:
        """Algorithm 8 for one record, in event-time order."""
        ending: list[tuple[int, list[int]]] = []
        beginning: list[tuple[int, int]] = []
        for q, window in enumerate(self.windows):
            new_state, begins, ends = window.on_record(state.states[q], ts, value)
            state.states[q] = new_state
            if ends:
                active = state.active[q]
                if not 0 <= ends <= len(active):
                    raise ValueError(f"window {self.names[q]!r} ({window.describe()}) ended {ends} windows "
                                     f"at {ts}, but {len(active)} are open")
                ending.append((q, active[:ends]))
                del active[:ends]
            if begins:
                if begins < 0:
                    raise ValueError(f"window {self.names[q]!r} ({window.describe()}) began {begins} windows")
                beginning.append((q, begins))
        if ending or beginning:
            cut = state.base + len(state.slice_starts)  # store.add(i, partial); partial <- 1_A
            state.slice_starts.append(ts)
            state.slice_partials.append(None)
            result = self.aggregate.result
            for q, firsts in ending:
                for first in firsts:
                    start = state.slice_starts[first - state.base]
                    partial = self._combine(state, first, cut)
                    if partial is not None:
                        out.append(FiredWindow(self.names[q], start, ts, result(partial), Firing.ON_TIME))
                    state.ended.append(EndedWindow(q, first, cut, start, ts))
            for q, begins in beginning:
                state.active[q].extend([cut] * begins)
        if any(state.active):  # partial <- partial ⊕ lift(r)
            partial = state.slice_partials[-1]
            state.slice_partials[-1] = (self.aggregate.lift(item) if partial is None
                                        else self.aggregate.fold(partial, item))

    def _combine(self, state: CuttyState, first: int, end: int) -> Any:
        """lookup(first, end): the slices `[first, end)` combined (None: all empty)."""
        chosen = [p for p in state.slice_partials[first - state.base:end - state.base] if p is not None]
        if self.keep_records:
            return [item for p in chosen for item in p] if chosen else None
        return combine_all(self.aggregate, chosen)

    def _purge(self, state: CuttyState) -> None:
        """store.purge(min(begins)): drop slices before every open or still-changeable window."""
        if not state.slice_starts:
            return
        needed = state.base + len(state.slice_starts) - 1  # the active partial stays
        for active in state.active:
            if active:
                needed = min(needed, active[0])
        for ended in state.ended:
            needed = min(needed, ended.first_slice)
        n = needed - state.base
        if n > 0:
            del state.slice_starts[:n], state.slice_partials[:n]
            state.base = needed

    def next_fire(self, state: CuttyState, fired: float) -> float:
        """The watermark at which this state must be fired next (inf: none)."""
        best = math.nextafter(state.staged_min, math.inf) if state.staged else math.inf
        if any(e.changed for e in state.ended):
            best = min(best, fired)
        return best
