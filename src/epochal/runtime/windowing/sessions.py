"""Session windows as slices that merge (dissertation §5.2.2; Scotty's context-aware windows).

Each session of a key is one slice with one partial. A record's own window is `[ts, ts + gap)`;
it joins every session it overlaps or touches (`ts <= end` and `start <= ts + gap`), so a record
arriving between two sessions, close enough to both, merges them into one slice by combining
their partials, in whatever order records arrive. The columnar path sessionizes a batch first
(runs of a key's sorted timestamps at most `gap` apart) and merges each run the same way.

Lateness: a record is too late when its own window ended `allowed_lateness` or more before the
watermark (`ts + gap + lateness <= watermark`). That keeps sessions a function of the records
accepted, whatever the order: a session can be freed once no acceptable record can touch it
(`end + gap + lateness <= watermark`). A session changed after it fired fires again; a merged or
extended session is a new window `(start, end)`.
"""

from __future__ import annotations

import math
from bisect import bisect_left, bisect_right
from collections.abc import Sequence
from typing import Any

from .aggregates import Combining, WindowAggregate
from .store import FiredWindow, Firing, SessionSlices, SliceStore


class Sessions:
    """The session queries of one operator, run over the `SessionSlices` of a `SliceStore`."""

    def __init__(self, names: Sequence[str], gaps: Sequence[float], aggregate: WindowAggregate,
                 lateness: float) -> None:
        self.names = tuple(names)
        self.gaps = tuple(gaps)
        self.aggregate = aggregate
        self.lateness = lateness
        self.keep_records = aggregate.combining is Combining.KEEP_RECORDS

    def slices(self, store: SliceStore, q: int) -> SessionSlices:
        if not store.sessions:
            store.sessions = [SessionSlices() for _ in self.gaps]
        return store.sessions[q]

    def is_late(self, q: int, ts: float, watermark: float) -> bool:
        return (ts + self.gaps[q]) + self.lateness <= watermark

    def add(self, store: SliceStore, q: int, ts: float, item: Any) -> None:
        """One record: join, extend, merge or start a session."""
        sessions = self.slices(store, q)
        gap = self.gaps[q]
        own_end = ts + gap
        starts, ends = sessions.starts, sessions.ends
        first = bisect_left(ends, ts)  # the first session ending at or after ts
        last = bisect_right(starts, own_end) - 1  # the last session starting at or before ts + gap
        if first == last:
            partials = sessions.partials
            partials[first] = self.aggregate.fold(partials[first], item)
            if ts < starts[first]:
                starts[first] = ts
            if own_end > ends[first]:
                ends[first] = own_end
            sessions.changed[first] = True
            end = ends[first]
        else:
            end = self._merge(sessions, first, last, ts, own_end, self.aggregate.lift(item))
        if end < store.next_fire:
            store.next_fire = end

    def add_run(self, store: SliceStore, q: int, start: float, end: float, partial: Any) -> None:
        """The columnar path: a run of one key's records spanning `[start, end)` (end = last
        timestamp + gap), already combined into `partial`."""
        sessions = self.slices(store, q)
        first = bisect_left(sessions.ends, start)
        last = bisect_right(sessions.starts, end) - 1
        merged_end = self._merge(sessions, first, last, start, end, partial)
        if merged_end < store.next_fire:
            store.next_fire = merged_end

    def _merge(self, sessions: SessionSlices, first: int, last: int, start: float, end: float,
               partial: Any) -> float:
        """Replace sessions `first..last` (none if last < first) by one with `partial` added."""
        if last < first:
            sessions.starts.insert(first, start)
            sessions.ends.insert(first, end)
            sessions.partials.insert(first, partial)
            sessions.changed.insert(first, True)
            return end
        merge = self.aggregate.merge
        combined = sessions.partials[first]
        for i in range(first + 1, last + 1):
            combined = merge(combined, sessions.partials[i])
        combined = merge(combined, partial)
        new_start = min(start, sessions.starts[first])
        new_end = max(end, sessions.ends[last])
        sessions.starts[first:last + 1] = [new_start]
        sessions.ends[first:last + 1] = [new_end]
        sessions.partials[first:last + 1] = [combined]
        sessions.changed[first:last + 1] = [True]
        return new_end

    def fire(self, store: SliceStore, watermark: float, previous: float, out: list[FiredWindow]) -> None:
        """Emit the changed sessions that have ended; free those no acceptable record can touch."""
        if not store.sessions:
            return
        result = self.aggregate.result
        for q, sessions in enumerate(store.sessions):
            name, gap = self.names[q], self.gaps[q]
            for i, end in enumerate(sessions.ends):
                if end > watermark:
                    break
                if sessions.changed[i]:
                    firing = Firing.ON_TIME if end > previous else Firing.LATE_UPDATE
                    out.append(FiredWindow(name, sessions.starts[i], end, result(sessions.partials[i]), firing))
                    sessions.changed[i] = False
            n = 0
            for end in sessions.ends:
                if (end + gap) + self.lateness > watermark:
                    break
                n += 1
            if n:
                del sessions.starts[:n], sessions.ends[:n], sessions.partials[:n], sessions.changed[:n]

    def peek(self, store: SliceStore, watermark: float, out: list[FiredWindow]) -> None:
        """The partial results of the sessions not complete at `watermark` (early firings)."""
        result = self.aggregate.result
        for q, sessions in enumerate(store.sessions):
            for start, end, partial in zip(sessions.starts, sessions.ends, sessions.partials):
                if end > watermark:
                    out.append(FiredWindow(self.names[q], start, end, result(partial), Firing.EARLY))

    def next_fire(self, store: SliceStore) -> float:
        """The earliest end of a changed session (inf: none)."""
        best = math.inf
        for sessions in store.sessions:
            for end, changed in zip(sessions.ends, sessions.changed):
                if changed and end < best:
                    best = end
        return best
