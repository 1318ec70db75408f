"""Watermarks: generated per source split, combined per task, carried in-band.

A watermark `t` promises that no record with a timestamp below `t` follows on that channel (the
dissertation's low watermark, §6.3). Generation follows Flink's per-split model: each split's
watermark trails the largest timestamp read from it by the allowed delay; a source subtask's
watermark is the minimum over its unfinished splits, leaving out the idle ones (no records for
the idleness timeout), and the subtask is idle when all of them are. A task's watermark is the
minimum over its inputs, leaving out idle, ended and loop back-edge channels: what comes round a
loop was already counted where it entered it, so a loop never holds back what lies downstream of
it. When everything is idle, the watermark moves to the largest any split or input reached (as
Flink's watermark valve does), so what was read is not held back by inputs that have nothing.
Watermarks only move forward, but for one case: a source subtask handed splits in a live rescale
sends `NO_WATERMARK`, which sets its channel back, as its new splits may be behind what it sent
(`runtime.splits`); the task's own watermark then waits. Pure bookkeeping: no I/O, times
passed in.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

NO_WATERMARK = -math.inf  # nothing is known yet: every record is on time
END_OF_TIME = math.inf  # the input ended: every window may fire


@dataclass(frozen=True, slots=True)
class WatermarkAdvance:
    """What a task forwards: a new watermark, or that it has become idle (or active again)."""

    timestamp: float
    idle: bool = False


class SplitWatermarks:
    """The watermark of one source subtask over the splits it reads.

    Args:
        max_delay: how far a split's watermark trails its largest timestamp.
        idleness: seconds without records after which a split stops holding the watermark back;
            None: never.
    """

    def __init__(self, max_delay: float, idleness: float | None) -> None:
        self.max_delay = max_delay
        self.idleness = idleness
        self.max_timestamp: dict[str, float] = {}  # per split: the largest timestamp read
        self._last_active: dict[str, float] = {}
        self._emitted = NO_WATERMARK
        self._idle = False

    def restore(self, max_timestamp: dict[str, float]) -> None:
        self.max_timestamp.update(max_timestamp)

    def take_back(self) -> None:
        """Forget what was sent: a live rescale hands this subtask splits that may be behind it,
        and it sent NO_WATERMARK, which sets its channels back (`runtime.splits`)."""
        self._emitted = NO_WATERMARK

    def on_records(self, split_id: str, max_timestamp: float | None, now: float) -> None:
        """A split delivered records (`max_timestamp` None: it delivered nothing this time)."""
        if max_timestamp is not None:
            self._last_active[split_id] = now
            if max_timestamp > self.max_timestamp.get(split_id, -math.inf):
                self.max_timestamp[split_id] = max_timestamp
        else:
            self._last_active.setdefault(split_id, now)

    def advance(self, splits: Iterable[str], now: float) -> WatermarkAdvance | None:
        """The watermark over the unfinished `splits`, if it moved (or the idle status changed)."""
        active = [s for s in splits if not self._is_idle(s, now)]
        if not active and self.idleness is not None and self._last_active:
            return self.idle()
        if not active:  # no splits left: the input is done (the task sends END_OF_TIME itself)
            return None
        low = min(self.max_timestamp.get(s, -math.inf) for s in active) - self.max_delay
        was_idle, self._idle = self._idle, False
        if low > self._emitted:
            self._emitted = low
            return WatermarkAdvance(low)
        if was_idle:
            return WatermarkAdvance(self._emitted)
        return None

    def idle(self) -> WatermarkAdvance | None:
        """Every split is idle, or there is none to read (a source waiting for splits to be
        found): move to the largest watermark any split reached, as Flink's watermark valve
        does, so records already read are not held back by splits that have nothing, and say
        idle (None if that was said already and nothing moved)."""
        top = max(self.max_timestamp.values(), default=-math.inf) - self.max_delay
        moved = top > self._emitted
        if moved:
            self._emitted = top
        if self._idle and not moved:
            return None
        self._idle = True
        return WatermarkAdvance(self._emitted, idle=True)

    def idle_at(self) -> float | None:
        """When the watermark goes idle if no records come (the first split to time out),
        so a subtask that receives nothing can be woken to say so; None if it never will."""
        if self.idleness is None or self._idle or not self._last_active:
            return None
        return min(self._last_active.values()) + self.idleness

    def _is_idle(self, split_id: str, now: float) -> bool:
        if self.idleness is None:
            return False
        last = self._last_active.get(split_id)
        return last is not None and now - last >= self.idleness


class InputWatermarks:
    """A task's watermark: the minimum over its input channels that count.

    A keyed edge gives a task one input per upstream subtask, and every one of them sends its
    watermarks (and its end): so the minimum is kept, not recomputed per watermark. The inputs
    at the minimum are counted; only when the last of them moves on is the minimum found again,
    once for every input that moved, so a task's watermark costs O(1) per watermark amortised,
    whatever its number of inputs.

    Args:
        channels: the number of inputs.
        back_edges: inputs that close a loop; they never hold the watermark back.
    """

    def __init__(self, channels: int, back_edges: frozenset[int] = frozenset()) -> None:
        self._marks = [NO_WATERMARK] * channels
        self._idle = [False] * channels
        self._counted = [i not in back_edges for i in range(channels)]
        self._n_counted = sum(self._counted)
        self._open = self._n_counted  # counted inputs not ended
        self._live = self._n_counted  # counted inputs neither ended nor idle
        self._low: float | None = NO_WATERMARK if self._live else None  # the live minimum; None: to find
        self._at_low = self._live  # live inputs at `_low`
        self.current = NO_WATERMARK
        self.is_idle = False
        self.has_seen = False  # a watermark arrived: this task is on event time

    def on_watermark(self, channel: int, timestamp: float, idle: bool = False) -> WatermarkAdvance | None:
        if not self._counted[channel]:
            return None
        self.has_seen = True
        mark = self._marks[channel]
        if timestamp > mark or timestamp == NO_WATERMARK:  # NO_WATERMARK: `take_back`
            mark = timestamp
        self._set(channel, mark, idle)
        return self._combine()

    def on_end(self, channel: int) -> WatermarkAdvance | None:
        """A channel ended: it holds nothing back any more."""
        if not self._counted[channel]:
            return None
        self._set(channel, END_OF_TIME, False)
        return self._combine()

    def _set(self, channel: int, mark: float, idle: bool) -> None:
        old, was_idle = self._marks[channel], self._idle[channel]
        if old != END_OF_TIME:
            if not was_idle:
                self._live -= 1
                if old == self._low:
                    self._at_low -= 1
                    if not self._at_low:
                        self._low = None  # found again when asked
            if mark == END_OF_TIME:
                self._open -= 1
        elif mark != END_OF_TIME:
            self._open += 1
        self._marks[channel], self._idle[channel] = mark, idle
        if mark != END_OF_TIME and not idle:
            self._live += 1
            low = self._low
            if low is not None:
                if mark < low:
                    self._low, self._at_low = mark, 1
                elif mark == low:
                    self._at_low += 1
            elif self._live == 1:
                self._low, self._at_low = mark, 1

    def _live_low(self) -> float:
        if self._low is None:
            live = [m for m, idle, c in zip(self._marks, self._idle, self._counted, strict=True)
                    if c and not idle and m != END_OF_TIME]
            self._low = min(live)
            self._at_low = live.count(self._low)
        return self._low

    def _combine(self) -> WatermarkAdvance | None:
        if self._n_counted and not self._open:  # every input ended
            low = END_OF_TIME
        elif not self._live:  # the open inputs are all idle: move to the largest mark, say so once
            top = max(m for m, c in zip(self._marks, self._counted, strict=True) if c and m != END_OF_TIME)
            moved = top > self.current
            if moved:
                self.current = top
            if moved or not self.is_idle:
                self.is_idle = True
                return WatermarkAdvance(self.current, idle=True)
            return None
        else:
            low = self._live_low()
        was_idle, self.is_idle = self.is_idle, False
        if low > self.current:
            self.current = low
            return WatermarkAdvance(low)
        if was_idle:
            return WatermarkAdvance(self.current)
        return None
