"""The interval join: pairs of equal keys whose times are within bounds of each other.

A left record at `l` and a right record at `r` of the same key join when
`l + lower <= r <= l + upper` (Flink's `IntervalJoinOperator`; an end is open when not
inclusive). Each key's state holds both sides, each sorted by time (`IntervalState`, one keyed
state entry per key, so both sides move with the key group): a record probes the other side with
two binary searches, not a scan of every buffered record as Flink's map state does, and is
inserted into its own.

Cleanup by watermark (Flink registers a cleanup timer per record): a record that is not late
has a time at or above the operator's watermark `W`, so a left record at `l` can meet no future
right record once `W > l + upper`, and a right record at `r` no future left one once
`W + lower > r`; each key keeps one event-time timer, at the earliest such time of its oldest
records, and drops them there. A left outer join emits `(left, None)` for a left record it drops
unmatched: from then on nothing can match it. Records whose time is below the watermark when
they arrive are late: they go to the late side output (`plan.two_inputs.LATE_TAGS`), since
records they would have met may have been dropped already. The join's result is then exactly the
join of the records that were not late, whatever the order of arrival and the batch boundaries.
A semi join emits a left record once, when it first meets a right record.
"""

from __future__ import annotations

import math
from bisect import bisect_left, bisect_right
from typing import Any

from ...plan.two_inputs import IntervalJoinSpec, JoinType
from .join_io import JoinOperator, SideBatch, after

_STATE = "__interval_join__"


class IntervalState:
    """One key's records of both sides, each sorted by time (ties in arrival order); `matched`
    marks the left records a right one met (kept for left outer joins only)."""

    __slots__ = ("left_times", "left_rows", "matched", "right_times", "right_rows", "timer")

    def __init__(self) -> None:
        self.left_times: list[float] = []
        self.left_rows: list[Any] = []
        self.matched: list[bool] = []
        self.right_times: list[float] = []
        self.right_rows: list[Any] = []
        self.timer = math.inf  # the key's registered timer

    def __deepcopy__(self, memo: dict[int, Any]) -> IntervalState:
        """The copy copy-on-write takes: the lists, not the records (records are not changed)."""
        out = IntervalState()
        out.left_times, out.left_rows, out.matched = list(self.left_times), list(self.left_rows), list(self.matched)
        out.right_times, out.right_rows, out.timer = list(self.right_times), list(self.right_rows), self.timer
        return out

    def __getstate__(self) -> tuple[Any, ...]:
        return (self.left_times, self.left_rows, self.matched, self.right_times, self.right_rows, self.timer)

    def __setstate__(self, state: tuple[Any, ...]) -> None:
        (self.left_times, self.left_rows, self.matched, self.right_times, self.right_rows, self.timer) = state

    def __len__(self) -> int:
        return len(self.left_times) + len(self.right_times)


class IntervalJoinOperator(JoinOperator):
    """`IntervalJoinSpec` at run time: one `IntervalState` and one cleanup timer per key."""

    def __init__(self, spec: IntervalJoinSpec) -> None:
        super().__init__(spec)
        self.lower, self.upper = spec.lower, spec.upper
        self.lower_inclusive, self.upper_inclusive = spec.lower_inclusive, spec.upper_inclusive
        self.outer = spec.output.how is JoinType.LEFT
        self.flagged = self.outer or self.semi  # keeps `matched` per left record

    def on_side(self, batch: SideBatch, side: int, out: list[Any]) -> list[Any]:
        backend, watermark = self.backend, self.watermark
        for record, key, group, t in zip(batch.records, batch.keys, batch.groups, batch.times):
            if t < watermark:
                self.late(side, record)
                continue
            backend.set_current_key(key, group)
            state = backend.get_mutable(_STATE, IntervalState)
            if side == 0:
                self._left(state, key, record, t, out)
            else:
                self._right(state, key, record, t, out)
            self._retime(state)
        return out

    def _left(self, state: IntervalState, key: Any, record: Any, t: float, out: list[Any]) -> None:
        times = state.right_times
        low, high = t + self.lower, t + self.upper
        first = bisect_left(times, low) if self.lower_inclusive else bisect_right(times, low)
        last = bisect_right(times, high) if self.upper_inclusive else bisect_left(times, high)
        rows = state.right_rows
        if self.semi:
            if last > first:
                self.emit_semi(record, out, key, t)
        else:
            for i in range(first, last):
                self.emit(record, rows[i], out, key, t, times[i])
        at = bisect_right(state.left_times, t)
        state.left_times.insert(at, t)
        state.left_rows.insert(at, record)
        if self.flagged:
            state.matched.insert(at, last > first)

    def _right(self, state: IntervalState, key: Any, record: Any, t: float, out: list[Any]) -> None:
        times, lower, upper = state.left_times, self.lower, self.upper
        # left times l with l + lower <= t <= l + upper: l + c is monotone in l, so search on it
        first = (bisect_left(times, t, key=lambda x: x + upper) if self.upper_inclusive
                 else bisect_right(times, t, key=lambda x: x + upper))
        last = (bisect_right(times, t, key=lambda x: x + lower) if self.lower_inclusive
                else bisect_left(times, t, key=lambda x: x + lower))
        rows = state.left_rows
        if self.semi:
            for i in range(first, last):
                if not state.matched[i]:
                    state.matched[i] = True
                    self.emit_semi(rows[i], out, key, times[i])
        else:
            for i in range(first, last):
                self.emit(rows[i], record, out, key, times[i], t)
                if self.outer:
                    state.matched[i] = True
        at = bisect_right(state.right_times, t)
        state.right_times.insert(at, t)
        state.right_rows.insert(at, record)

    def _expiry(self, state: IntervalState) -> float:
        """The earliest watermark at which the key's oldest records can go (inf: none held)."""
        best = math.inf
        if state.left_times:
            best = after(state.left_times[0] + self.upper)
        if state.right_times:
            r, lower = state.right_times[0], self.lower
            # a w with w + lower > r (as floats, so `on_timer`'s test holds there): a few units in
            # the last place past r - lower, at the scale of the largest of the three
            w = (r - lower) + 4 * math.ulp(max(abs(r), abs(lower), abs(r - lower), 1.0))
            best = min(best, w)
        return best

    def _retime(self, state: IntervalState) -> None:
        """Move the key's timer to its state's expiry: the state's last change (on the disk
        backend, touching the timers writes the held state back)."""
        before, state.timer = state.timer, self._expiry(state)
        self.retime(before, state.timer)

    def on_timer(self, key: Any, watermark: float, out: list[Any]) -> None:
        backend = self.backend
        state = backend.get_mutable(_STATE, IntervalState)
        state.timer = math.inf  # it fired: no longer registered
        upper, lower = self.upper, self.lower
        n = 0
        times = state.left_times
        while n < len(times) and watermark > times[n] + upper:
            n += 1
        if n:
            if self.outer:
                for i in range(n):
                    if not state.matched[i]:
                        self.emit(state.left_rows[i], None, out, key, times[i], None)
            if self.flagged:
                del state.matched[:n]
            del state.left_times[:n], state.left_rows[:n]
        n = 0
        times = state.right_times
        while n < len(times) and watermark + lower > times[n]:
            n += 1
        if n:
            del state.right_times[:n], state.right_rows[:n]
        if not len(state):
            backend.delete(_STATE)
            return
        self._retime(state)


__all__ = ["IntervalJoinOperator", "IntervalState"]
