"""A brute-force reference for window aggregation: every window evaluated by its definition.

No slices, no partials: each window keeps the list of records it holds and its result is computed
from that list when it fires. The reference sees the same event trace as the engine (records and
watermarks in arrival order) and applies the rules of `epochal.runtime.windowing.engine`:

- A window fires (ON_TIME) at the first watermark event at or past its end, if it holds records.
- A window is open for late records until `end + lateness <= watermark`; a record behind the
  watermark joins the open windows holding it, and a window that had already completed fires again
  (LATE_UPDATE) at the next watermark event.
- A record is late for a query if windows of that query hold it but none is open; sessions: if its
  own window `[ts, ts + gap)` has closed; user-defined windows: if no open window's time span holds
  it (records behind the watermark never reach the window function).
- Sessions are recomputed from scratch from every accepted record at each watermark event; a
  complete session fires again when its set of records changed since the previous event.
- A user-defined window function sees the on-time records of its key in (time, arrival) order once
  the watermark has passed them (`ts < watermark`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from epochal.plan.windows import DeterministicWindow, Session, Sliding, Tumbling

Member = tuple[float, int, Any]  # (timestamp, arrival number, value)
Emission = tuple[Any, str, float, float, Any, str]  # (key, query, start, end, result, firing)


@dataclass
class _Window:
    start: float
    end: float
    members: list[Member] = field(default_factory=list)
    changed: bool = False


@dataclass
class _UdwKey:
    state: Any
    active: list[_Window] = field(default_factory=list)
    ended: list[_Window] = field(default_factory=list)


class Reference:
    """Window results by definition. `result(members)` turns a window's records into its result."""

    def __init__(self, queries: dict[str, Any], result: Callable[[list[Member]], Any], lateness: float) -> None:
        self.queries = queries
        self.result = result
        self.lateness = lateness
        self.watermark = -math.inf
        self.previous = -math.inf
        self.seq = 0
        self.periodic: dict[tuple[str, Any, int], _Window] = {}
        self.session_records: dict[tuple[str, Any], list[Member]] = {}
        self.session_before: dict[tuple[str, Any], set[frozenset[int]]] = {}
        self.staged: dict[Any, list[Member]] = {}
        self.udw: dict[tuple[str, Any], _UdwKey] = {}
        self.keys: list[Any] = []

    # -- records -------------------------------------------------------------------------------

    def record(self, key: Any, ts: float, value: Any) -> set[str]:
        """Add one record; returns the queries it is late for."""
        member = (ts, self.seq, value)
        self.seq += 1
        if key not in self.keys:
            self.keys.append(key)
        w, lateness = self.watermark, self.lateness
        late = set()
        for name, spec in self.queries.items():
            if isinstance(spec, (Tumbling, Sliding)):
                holding = [k for k in _candidates(spec, ts) if spec.start_of(k) <= ts < spec.end_of(k)]
                open_ = [k for k in holding if spec.end_of(k) + lateness > w]
                if holding and not open_:
                    late.add(name)
                for k in open_:
                    window = self.periodic.setdefault((name, key, k), _Window(spec.start_of(k), spec.end_of(k)))
                    window.members.append(member)
                    window.changed = True
            elif isinstance(spec, Session):
                if (ts + spec.gap) + lateness <= w:
                    late.add(name)
                else:
                    self.session_records.setdefault((name, key), []).append(member)
            else:
                udw = self._udw(name, key, spec)
                if ts >= w:
                    continue  # staged below, once for all user-defined queries
                windows = [x for x in udw.active if x.start <= ts]
                windows += [x for x in udw.ended if x.start <= ts < x.end and x.end + lateness > w]
                if not windows:
                    late.add(name)
                for window in windows:
                    window.members.append(member)
                    if window in udw.ended:
                        window.changed = True
        if ts >= w and any(isinstance(s, DeterministicWindow) for s in self.queries.values()):
            self.staged.setdefault(key, []).append(member)
        return late

    def _udw(self, name: str, key: Any, spec: DeterministicWindow[Any]) -> _UdwKey:
        if (name, key) not in self.udw:
            self.udw[(name, key)] = _UdwKey(spec.initial_state())
        return self.udw[(name, key)]

    # -- watermarks ----------------------------------------------------------------------------

    def advance(self, watermark: float) -> list[Emission]:
        """A watermark event: every window emitted now."""
        w = self.watermark = max(self.watermark, watermark)
        previous = self.previous
        out: list[Emission] = []
        for (name, key, _), window in self.periodic.items():
            if window.end <= w and (window.end > previous or window.changed):
                firing = "on_time" if window.end > previous else "late_update"
                out.append((key, name, window.start, window.end, self.result(window.members), firing))
                window.changed = False
        for (name, key), records in self.session_records.items():
            gap = self.queries[name].gap
            now = set()
            for start, end, members in _sessions(records, gap):
                ids = frozenset(m[1] for m in members)
                now.add(ids)
                if end <= w and (end > previous or ids not in self.session_before.get((name, key), set())):
                    firing = "on_time" if end > previous else "late_update"
                    out.append((key, name, start, end, self.result(members), firing))
            self.session_before[(name, key)] = now
        self._advance_udw(w, out)
        self.previous = w
        return out

    def _advance_udw(self, w: float, out: list[Emission]) -> None:
        udws = {n: s for n, s in self.queries.items() if isinstance(s, DeterministicWindow)}
        if not udws:
            return
        for key in self.keys:
            for name in udws:
                udw = self._udw(name, key, udws[name])
                for window in udw.ended:
                    if window.changed:
                        out.append((key, name, window.start, window.end, self.result(window.members), "late_update"))
                        window.changed = False
            staged = self.staged.get(key, [])
            ready = sorted((m for m in staged if m[0] < w), key=lambda m: (m[0], m[1]))
            self.staged[key] = [m for m in staged if m[0] >= w]
            for member in ready:
                ts, _, value = member
                for name, spec in udws.items():
                    udw = self._udw(name, key, spec)
                    udw.state, begins, ends = spec.on_record(udw.state, ts, value)
                    for window in udw.active[:ends]:
                        window.end = ts
                        out.append((key, name, window.start, ts, self.result(window.members), "on_time"))
                        udw.ended.append(window)
                    del udw.active[:ends]
                    udw.active.extend(_Window(ts, math.inf) for _ in range(begins))
                    for window in udw.active:
                        window.members.append(member)
            for name in udws:
                udw = self.udw[(name, key)]
                udw.ended = [x for x in udw.ended if x.end + self.lateness > w]


def _candidates(spec: Tumbling | Sliding, ts: float) -> range:
    """Window indices around `ts`, wide enough to include every window that may hold it."""
    low = math.floor((ts - spec.offset - spec.size) / spec.slide) - 2
    high = math.floor((ts - spec.offset) / spec.slide) + 2
    return range(low, high + 1)


def _sessions(records: list[Member], gap: float) -> list[tuple[float, float, list[Member]]]:
    """Sessions by definition: sorted records, a new session where the next is more than gap on."""
    out: list[tuple[float, float, list[Member]]] = []
    for member in sorted(records, key=lambda m: (m[0], m[1])):
        if out and member[0] <= out[-1][1]:
            start, _, members = out[-1]
            members.append(member)
            out[-1] = (start, member[0] + gap, members)
        else:
            out.append((member[0], member[0] + gap, [member]))
    return out
