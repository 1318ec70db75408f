"""The caches of periodic windows (`WindowCalendar`, the edges `SliceEdges` keeps around recent
timestamps) against per-query arithmetic, while the times asked for jump forward and back: a
cache left standing where it no longer answers would show as a wrong window or edge."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from scenarios import window_lists

from epochal.runtime.windowing.calendar import WindowCalendar
from epochal.runtime.windowing.edges import SliceEdges

slides = [0.1, 0.25, 0.3, 0.5, 1.0, 2.5, 7.0, 60.0]
sizes = [0.3, 0.5, 1.0, 1.3, 4.0, 10.0, 61.0]


def queries() -> st.SearchStrategy[list[Any]]:
    return window_lists(slides, sizes, [0.0, 1 / 3, 0.5], max_size=16)


times = st.floats(-1e4, 1e4, allow_nan=False) | st.integers(-10**5, 10**5).map(lambda i: i / 10)


def _windows_ending(windows: list[Any], t0: float, t1: float) -> list[tuple[float, float, int]]:
    out = []
    for q, w in enumerate(windows):
        k = w.first_end_index(t0)
        while w.end_of(k) <= t1:
            out.append((w.end_of(k), w.start_of(k), q))
            k += 1
    return sorted(out)


def _first_open_start(windows: list[Any], watermark: float, lateness: float) -> float:
    best = math.inf
    for w in windows:
        k = w.first_end_index(watermark - lateness) - 2
        while w.end_of(k) + lateness <= watermark:
            k += 1
        best = min(best, w.start_of(k))
    return best


@settings(max_examples=150, deadline=None)
@given(queries(), st.sampled_from([0.0, 0.7, 5.0, 100.0]),
       st.lists(st.tuples(times, st.floats(0.0, 30.0)), min_size=1, max_size=30))
def test_the_calendar_answers_as_the_arithmetic_per_query_wherever_the_watermark_jumps(
        windows: list[Any], lateness: float, steps: list[tuple[float, float]]) -> None:
    calendar = WindowCalendar(windows, lateness, SliceEdges(windows))
    for t, width in steps:
        query, start, end = calendar.ending_between(t, t + width)
        assert list(zip(end.tolist(), start.tolist(), query.tolist())) == _windows_ending(windows, t, t + width)
        assert calendar.first_end_after(t) == min(w.end_of(w.first_end_index(t)) for w in windows)
        assert calendar.first_open_start(t + width) == _first_open_start(windows, t + width, lateness)
    assert calendar.first_end_after(math.inf) == math.inf
    assert calendar.first_open_start(math.inf) == math.inf


@settings(max_examples=150, deadline=None)
@given(queries(), st.lists(st.lists(times, min_size=1, max_size=20) | times.map(lambda t: [t]),
                           min_size=1, max_size=20))
def test_batches_and_single_records_find_their_slices_as_timestamps_jump(windows: list[Any],
                                                                         batches: list[list[float]]) -> None:
    """`slices_of` (batches) and `slice_of` (one record) share the cached edges."""
    edges = SliceEdges(windows)
    reach = 2 * max(w.size + w.slide for w in windows)

    def brute(ts: float) -> tuple[float, float]:
        near = sorted({e for w in windows for e in w.boundaries(ts - reach, ts + reach)})
        return max(e for e in near if e <= ts), min(e for e in near if e > ts)

    for batch in batches:
        if len(batch) == 1:
            assert edges.slice_of(batch[0]) == brute(batch[0])
            continue
        index, starts, ends = edges.slices_of(np.array(batch))
        assert list(zip(starts[index].tolist(), ends[index].tolist())) == [brute(t) for t in batch]
