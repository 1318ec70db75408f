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
