"""Tests of `epochal.runtime.watermarks`: per-split generation and per-task combination."""

from __future__ import annotations

import math

from hypothesis import given
from hypothesis import strategies as st

from epochal.runtime.watermarks import END_OF_TIME, InputWatermarks, SplitWatermarks, WatermarkAdvance


def test_a_subtask_watermark_is_the_minimum_over_its_splits_less_the_delay() -> None:
    gen = SplitWatermarks(max_delay=2.0, idleness=None)
    gen.on_records("a", 10.0, now=0.0)
    assert gen.advance(["a", "b"], now=0.0) is None  # b has delivered nothing: -inf holds it back
    gen.on_records("b", 7.0, now=0.0)
    assert gen.advance(["a", "b"], now=0.0) == WatermarkAdvance(5.0)
    gen.on_records("b", 20.0, now=0.0)
    assert gen.advance(["a", "b"], now=0.0) == WatermarkAdvance(8.0)
    assert gen.advance(["a", "b"], now=0.0) is None  # unchanged: nothing to send
    assert gen.advance(["b"], now=0.0) == WatermarkAdvance(18.0)  # a finished


def test_an_idle_split_stops_holding_the_watermark_back_until_it_delivers_again() -> None:
    gen = SplitWatermarks(max_delay=0.0, idleness=5.0)
    gen.on_records("a", 10.0, now=0.0)
    gen.on_records("b", 3.0, now=0.0)
    assert gen.advance(["a", "b"], now=1.0) == WatermarkAdvance(3.0)
    gen.on_records("a", 12.0, now=6.0)
    gen.on_records("b", None, now=6.0)  # b has nothing
    assert gen.advance(["a", "b"], now=6.0) == WatermarkAdvance(12.0)  # b idle since 0.0
    gen.on_records("b", 4.0, now=7.0)  # b is back, behind: the watermark never goes back
    assert gen.advance(["a", "b"], now=7.0) is None
    assert gen.advance(["a", "b"], now=13.0) == WatermarkAdvance(12.0, idle=True)  # all idle


def test_a_task_watermark_is_the_minimum_over_live_inputs_and_ignores_back_edges() -> None:
    marks = InputWatermarks(3, back_edges=frozenset({2}))
    assert marks.on_watermark(0, 5.0) is None
    assert marks.on_watermark(2, 1.0) is None  # a back-edge never holds anything back
    assert marks.on_watermark(1, 7.0) == WatermarkAdvance(5.0)
    assert marks.on_watermark(0, 9.0) == WatermarkAdvance(7.0)
    assert marks.on_watermark(1, 0.0, idle=True) == WatermarkAdvance(9.0)  # 1 idle: 0 alone counts
    assert marks.on_end(0) == WatermarkAdvance(9.0, idle=True)  # 0 ended, 1 idle: nothing to say
    assert marks.on_watermark(1, 12.0) == WatermarkAdvance(12.0)
    assert marks.on_end(1) == WatermarkAdvance(END_OF_TIME)


@given(st.lists(st.tuples(st.integers(0, 2), st.floats(-1e6, 1e6)), max_size=40))
def test_watermarks_never_go_back(events: list[tuple[int, float]]) -> None:
    marks = InputWatermarks(3)
    last = -math.inf
    for channel, ts in events:
        advance = marks.on_watermark(channel, ts)
        if advance is not None and not advance.idle:
            assert advance.timestamp >= last
            last = advance.timestamp
    assert marks.current == last


class _Reference:
    """The minimum over the inputs as it was computed before it was kept: from scratch, per event."""

    def __init__(self, channels: int, back_edges: frozenset[int]) -> None:
        self.marks = [-math.inf] * channels
        self.idle = [False] * channels
        self.counted = [i not in back_edges for i in range(channels)]
        self.current = -math.inf
        self.is_idle = False

    def watermark(self, channel: int, timestamp: float, idle: bool) -> WatermarkAdvance | None:
        if not self.counted[channel]:
            return None
        self.idle[channel] = idle
        if timestamp > self.marks[channel] or timestamp == -math.inf:
            self.marks[channel] = timestamp
        return self.combine()

    def end(self, channel: int) -> WatermarkAdvance | None:
        if not self.counted[channel]:
            return None
        self.marks[channel], self.idle[channel] = END_OF_TIME, False
        return self.combine()

    def combine(self) -> WatermarkAdvance | None:
        counted = [(m, i) for m, i, c in zip(self.marks, self.idle, self.counted) if c]
        open_marks = [(m, i) for m, i in counted if m != END_OF_TIME]
        if counted and not open_marks:
            low = END_OF_TIME
        else:
            live = [m for m, i in open_marks if not i]
            if not live:
                top = max(m for m, _ in open_marks)
                moved = top > self.current
                if moved:
                    self.current = top
                if moved or not self.is_idle:
                    self.is_idle = True
                    return WatermarkAdvance(self.current, idle=True)
                return None
            low = min(live)
        was_idle, self.is_idle = self.is_idle, False
        if low > self.current:
            self.current = low
            return WatermarkAdvance(low)
        if was_idle:
            return WatermarkAdvance(self.current)
        return None


events = st.lists(
    st.tuples(st.integers(0, 5), st.sampled_from(["mark", "idle", "end", "back"]), st.integers(0, 6)), max_size=60
)


@given(events, st.frozensets(st.integers(0, 5), max_size=2))
def test_the_kept_minimum_is_the_minimum_over_the_inputs_after_every_event(
    trace: list[tuple[int, str, int]], back_edges: frozenset[int]
) -> None:
    kept, reference = InputWatermarks(6, back_edges), _Reference(6, back_edges)
    ended: set[int] = set()
    for channel, kind, t in trace:
        if channel in ended:  # nothing follows an end on a channel
            continue
        if kind == "end":
            ended.add(channel)
            assert kept.on_end(channel) == reference.end(channel)
        else:
            timestamp = -math.inf if kind == "back" else float(t)
            idle = kind == "idle"
            assert kept.on_watermark(channel, timestamp, idle) == reference.watermark(channel, timestamp, idle)
        assert (kept.current, kept.is_idle) == (reference.current, reference.is_idle)
