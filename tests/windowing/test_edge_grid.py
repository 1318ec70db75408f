"""Slices found on an edge grid (`SliceEdges.slices_of` with windows of whole ticks of 2**-20 s)
against the windows' boundaries by definition, for batches of nearby times after 1970 (where the
grid answers), with times exactly on an edge, a tick below it and a float step below it: a grid
cell off by one, or a time rounded to the wrong tick, shows as a wrong slice."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from scenarios import window_lists

from epochal.plan.windows import Sliding
from epochal.runtime.windowing.edges import SliceEdges

TICK = 2.0 ** -20
bases = st.sampled_from([0.0, 3.0, 1_700_000_000.0, 1_700_000_000.25, 4_000_000_000.5])
slides = [0.25, 0.5, 1.0, 2.5, 3.0, 7.0, 30.0, 60.0, 1.0 + TICK]
sizes = [0.5, 1.0, 4.0, 10.0, 61.0, 90.0]


def grid_queries() -> st.SearchStrategy[list[Any]]:
    """Windows whose boundaries are whole ticks: their edges lie on a grid."""
    return window_lists(slides, sizes, [0.0, 0.5, 0.25], max_size=12)


def _brute(windows: list[Any], ts: float) -> tuple[float, float]:
    reach = 2 * max(w.size + w.slide for w in windows)
    near = sorted({e for w in windows for e in w.boundaries(ts - reach, ts + reach)})
    return max(e for e in near if e <= ts), min(e for e in near if e > ts)


@settings(max_examples=200, deadline=None)
@given(grid_queries(), bases, st.lists(st.floats(0.0, 40.0), min_size=2, max_size=30),
       st.lists(st.integers(0, 2), min_size=2, max_size=30))
def test_slices_on_an_edge_grid_equal_the_boundaries(windows: list[Any], base: float, offsets: list[float],
                                                      nudges: list[int]) -> None:
    edges = SliceEdges(windows)
    times = [base + o for o in offsets]
    near = sorted({e for w in windows for e in w.boundaries(base, base + 41.0)})
    for i, nudge in enumerate(nudges):  # an edge itself, a tick below it, a float step below it
        if near:
            edge = near[(i * 7) % len(near)]
            times.append(edge if nudge == 0 else edge - TICK if nudge == 1 else math.nextafter(edge, -math.inf))
    batch = np.array([t for t in times if t >= 0.0])
    if len(batch) < 2:
        return
    index, starts, ends = edges.slices_of(batch)
    assert list(zip(starts[index].tolist(), ends[index].tolist())) == [_brute(windows, t) for t in batch]


def test_whole_second_windows_are_found_on_the_grid() -> None:
    """The grid answers for the usual windows (so the property above tests it), and not for
    windows off the tick grid (a tenth of a second is no whole number of ticks)."""
    edges = SliceEdges([Sliding(60.0 + i, 30.0 + i % 30) for i in range(100)])
    edges.slices_of(np.array([1_700_000_000.0, 1_700_000_003.5]))
    assert edges._grid is not None
    tenths = SliceEdges([Sliding(1.0, 0.1)])
    tenths.slices_of(np.array([1_700_000_000.0, 1_700_000_000.35]))
    assert tenths._grid is None
