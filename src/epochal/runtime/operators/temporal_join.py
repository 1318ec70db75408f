"""The temporal join: a stream joined with the version of a table valid at each record's time.

Input 1 is a versioned table as a stream of versions (Flink SQL's versioned table, Spark's
"stream-static" join made dynamic): each record is the new version of its key, valid from its
event time until the next version's. Input 0's record at `t` joins the version of its key valid
at `t`: the latest with a time at or before `t` (of equal times, the one that arrived last).

Event time (`TemporalMode.EVENT_TIME`, Flink's event-time temporal join): a stream record waits
in its key's state until the watermark passes `t`, as a version at `t` may still come; then it
joins and goes. A key keeps the versions still needed: those at or after the watermark, and the
latest before it (the one valid at the watermark). A stream record behind the watermark when it
arrives, or a version behind it, is late (the versions it needed may be gone; a version could
change results already emitted): late records go to the join's late side output.

Arrival (`TemporalMode.ARRIVAL`, a lookup join): a stream record joins the newest version its key
has when it arrives, at once; a key keeps one version. Results depend on how the two inputs
interleave, as a lookup against a changing table does; they are still exactly once.

State is one entry per key (`TemporalState`), so the table's rows and the waiting records move,
restore and rescale with the key's group.
"""

from __future__ import annotations

import math
from bisect import bisect_left, bisect_right
from typing import Any

from ...plan.two_inputs import JoinType, TemporalJoinSpec, TemporalMode
from .join_io import JoinOperator, SideBatch, after

_STATE = "__temporal_join__"


class TemporalState:
    """One key's versions and waiting records, each sorted by time (ties in arrival order)."""

    __slots__ = ("version_times", "versions", "waiting_times", "waiting", "timer")

    def __init__(self) -> None:
        self.version_times: list[float] = []
        self.versions: list[Any] = []
        self.waiting_times: list[float] = []
        self.waiting: list[Any] = []
        self.timer = math.inf

    def __deepcopy__(self, memo: dict[int, Any]) -> TemporalState:
        out = TemporalState()
        out.version_times, out.versions = list(self.version_times), list(self.versions)
        out.waiting_times, out.waiting, out.timer = list(self.waiting_times), list(self.waiting), self.timer
        return out

    def __getstate__(self) -> tuple[Any, ...]:
        return (self.version_times, self.versions, self.waiting_times, self.waiting, self.timer)

    def __setstate__(self, state: tuple[Any, ...]) -> None:
        self.version_times, self.versions, self.waiting_times, self.waiting, self.timer = state


class TemporalJoinOperator(JoinOperator):
    """`TemporalJoinSpec` at run time."""

    def __init__(self, spec: TemporalJoinSpec) -> None:
        super().__init__(spec)
        self.by_arrival = spec.mode is TemporalMode.ARRIVAL
        self.outer = spec.output.how is JoinType.LEFT

    def on_side(self, batch: SideBatch, side: int, out: list[Any]) -> list[Any]:
        if self.by_arrival:
            return self._on_arrival(batch, side, out)
        backend, watermark = self.backend, self.watermark
        for record, key, group, t in zip(batch.records, batch.keys, batch.groups, batch.times):
            if t < watermark:
                self.late(side, record)
                continue
            backend.set_current_key(key, group)
            state = backend.get_mutable(_STATE, TemporalState)
            if side == 0:
                at = bisect_right(state.waiting_times, t)
                state.waiting_times.insert(at, t)
                state.waiting.insert(at, record)
            else:
                at = bisect_right(state.version_times, t)
                state.version_times.insert(at, t)
                state.versions.insert(at, record)
                self._forget(state, watermark)
            self._retime(state)
        return out

    def _on_arrival(self, batch: SideBatch, side: int, out: list[Any]) -> list[Any]:
        backend = self.backend
        for record, key, group, t in zip(batch.records, batch.keys, batch.groups, batch.times or
                                         [math.nan] * len(batch.records)):
            backend.set_current_key(key, group)
            if side == 1:
                backend.put(_STATE, (t, record))
                continue
            version = backend.get(_STATE)
            if version is not None and self.semi:
                self.emit_semi(record, out, key, t)
            elif version is not None:
                self.emit(record, version[1], out, key, t, version[0])
            elif self.outer:
                self.emit(record, None, out, key, t, None)
        return out

    @staticmethod
    def _forget(state: TemporalState, watermark: float) -> None:
        """Drop the versions no record at or after `watermark` can need: all before the latest
        one before it."""
        n = bisect_left(state.version_times, watermark) - 1
        if n > 0:
            del state.version_times[:n], state.versions[:n]

    def _retime(self, state: TemporalState) -> None:
        before = state.timer
        state.timer = after(state.waiting_times[0]) if state.waiting_times else math.inf
        self.retime(before, state.timer)

    def on_timer(self, key: Any, watermark: float, out: list[Any]) -> None:
        backend = self.backend
        state = backend.get_mutable(_STATE, TemporalState)
        state.timer = math.inf
        times = state.waiting_times
        n = bisect_left(times, watermark)  # the records the watermark has passed
        for i in range(n):
            t = times[i]
            v = bisect_right(state.version_times, t) - 1
            if v >= 0 and self.semi:
                self.emit_semi(state.waiting[i], out, key, t)
            elif v >= 0:
                self.emit(state.waiting[i], state.versions[v], out, key, t, state.version_times[v])
            elif self.outer:
                self.emit(state.waiting[i], None, out, key, t, None)
        del state.waiting_times[:n], state.waiting[:n]
        self._forget(state, watermark)
        self._retime(state)


__all__ = ["TemporalJoinOperator", "TemporalState"]
