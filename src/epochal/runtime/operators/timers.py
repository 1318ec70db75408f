"""Keyed timers in two domains, event time and processing time, kept as keyed state.

A timer belongs to a key, so it lives where the key's state lives: in the key's key group, as a
state entry (a sorted tuple of timestamps per key and domain). It is checkpointed, restored,
rescaled and moved with its key group like any other state; only the heaps that order the
timers of this subtask are rebuilt on restore. Processing-time timers fire when the task's clock
reaches them; event-time timers when the watermark does (a timer at `t` fires once the
watermark is at least `t`).
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Iterator
from enum import Enum
from typing import Any, NamedTuple

from ...state.contract import KeyedStateBackend


class TimeDomain(Enum):
    """Which clock a timer follows."""

    EVENT_TIME = "event_time"
    PROCESSING_TIME = "processing_time"


class PendingTimer(NamedTuple):
    """A timer still registered when a keyed process function's input ended (`on_end_of_input`)."""

    key: Any
    timestamp: float
    domain: TimeDomain


_STATE = {TimeDomain.PROCESSING_TIME: "__timers__", TimeDomain.EVENT_TIME: "__event_timers__"}


class KeyedTimers:
    """The timers of one keyed operator subtask, for the backend's current key."""

    def __init__(self, backend: KeyedStateBackend) -> None:
        self.backend = backend
        self._heaps: dict[TimeDomain, list[tuple[float, int, int, Any]]] = {d: [] for d in TimeDomain}
        self._seq = itertools.count()

    def register(self, domain: TimeDomain, ts: float) -> None:
        """A timer at `ts` for the current key; registering it twice keeps one."""
        backend, name = self.backend, _STATE[domain]
        timers = backend.get(name, ())
        if ts not in timers:
            backend.put(name, tuple(sorted((*timers, ts))))
            heapq.heappush(self._heaps[domain], (ts, next(self._seq), backend.current_key_group, backend.current_key))

    def delete(self, domain: TimeDomain, ts: float) -> None:
        """Drop the current key's timer at `ts`, if there is one (its heap entry is skipped)."""
        backend, name = self.backend, _STATE[domain]
        timers = backend.get(name, ())
        if ts in timers:
            rest = tuple(t for t in timers if t != ts)
            if rest:
                backend.put(name, rest)
            else:
                backend.delete(name)

    def next(self, domain: TimeDomain) -> float | None:
        heap = self._heaps[domain]
        return heap[0][0] if heap else None

    def pop_due(self, domain: TimeDomain, until: float) -> Iterator[tuple[float, Any]]:
        """Each timer at or before `until`, in time order, as `(ts, key)` with the backend set to
        its key and the timer removed; timers registered meanwhile for `until` or earlier fire too."""
        heap, backend, name = self._heaps[domain], self.backend, _STATE[domain]
        while heap and heap[0][0] <= until:
            ts, _, key_group, key = heapq.heappop(heap)
            backend.set_current_key(key, key_group)
            if ts not in backend.get(name, ()):
                continue  # deleted, or fired already
            self.delete(domain, ts)
            yield ts, key

    def pending(self, domain: TimeDomain) -> list[PendingTimer]:
        """Every timer of `domain` still registered, in time order (then key group order)."""
        backend, name = self.backend, _STATE[domain]
        out: list[tuple[float, int, PendingTimer]] = []
        for key_group, key in list(backend.keys(name)):
            backend.set_current_key(key, key_group)
            out.extend((ts, key_group, PendingTimer(key, ts, domain)) for ts in backend.get(name, ()))
        out.sort(key=lambda entry: (entry[0], entry[1]))
        return [timer for _, _, timer in out]

    def restore(self) -> None:
        """Rebuild the heaps from the timers in the (restored) keyed state."""
        backend = self.backend
        for domain, name in _STATE.items():
            heap = self._heaps[domain] = []
            for key_group, key in list(backend.keys(name)):
                backend.set_current_key(key, key_group)
                for ts in backend.get(name, ()):
                    heap.append((ts, next(self._seq), key_group, key))
            heapq.heapify(heap)
