"""The windowing core on worked examples: definitions, slice edges, lateness, sessions, Cutty."""

from __future__ import annotations

import datetime as dt
import itertools
import math
import pickle
import random
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scenarios import CountWindows

from epochal.plan.windows import DeterministicWindow, Session, Sliding, Tumbling
from epochal.runtime.windowing import (
    Admission,
    Aggregate,
    Count,
    FiredWindow,
    FireFirst,
    Firing,
    Max,
    Process,
    Sum,
    Windowing,
)
from epochal.runtime.windowing.edges import _SCALAR_LIMIT, SliceEdges

# -- definitions ----------------------------------------------------------------------------------


def test_durations_are_seconds_or_timedeltas() -> None:
    assert Sliding(dt.timedelta(minutes=1), dt.timedelta(seconds=10), offset=2) == Sliding(60.0, 10.0, 2.0)
    assert Tumbling(60).slide == 60.0
    assert Session(dt.timedelta(milliseconds=1500)).gap == 1.5


@pytest.mark.parametrize(
    ("make", "error", "names"),
    [
        (lambda: Tumbling(0), ValueError, "size"),
        (lambda: Tumbling(-5), ValueError, "size"),
        (lambda: Tumbling("60"), TypeError, "size"),
        (lambda: Tumbling(60, offset=60), ValueError, "offset"),
        (lambda: Sliding(10, 0), ValueError, "slide"),
        (lambda: Sliding(10, math.inf), ValueError, "slide"),
        (lambda: Sliding(10, 3, offset=3), ValueError, "offset"),
        (lambda: Sliding(10, 3, offset=-1), ValueError, "offset"),
        (lambda: Session(0), ValueError, "gap"),
        (lambda: Windowing({}, Count()), ValueError, "at least one"),
        (lambda: Windowing({"w": 60}, Count()), TypeError, "'w'"),
        (lambda: Windowing(Tumbling(1), Count(), allowed_lateness=-1), ValueError, "allowed_lateness"),
        (lambda: Windowing(Tumbling(1), len), TypeError, "aggregate"),  # type: ignore[arg-type]
    ],
)
def test_bad_definitions_are_refused_naming_the_argument(make: Any, error: type[Exception], names: str) -> None:
    with pytest.raises(error, match=names):
        make()


def test_periodic_windows_say_their_boundaries() -> None:
    sliding = Sliding(10, 3, offset=1)
    assert sliding.window_starts(0, 12) == [1.0, 4.0, 7.0, 10.0]
    assert sliding.window_ends(0, 12) == [2.0, 5.0, 8.0, 11.0]
    assert sliding.boundaries(0, 12) == [1.0, 2.0, 4.0, 5.0, 7.0, 8.0, 10.0, 11.0]
    assert sliding.windows_containing(7.0) == [(-2.0, 8.0), (1.0, 11.0), (4.0, 14.0), (7.0, 17.0)]
    assert Sliding(1, 2).windows_containing(1.5) == []  # a sampling gap


def test_aggregate_needs_merge_to_combine_slices() -> None:
    class Average:
        def create_accumulator(self) -> tuple[int, int]:
            return (0, 0)

        def add(self, value: int, acc: tuple[int, int]) -> tuple[int, int]:
            return (acc[0] + value, acc[1] + 1)

        def get_result(self, acc: tuple[int, int]) -> float:
            return acc[0] / acc[1]

    with pytest.raises(TypeError, match="merge"):
        Aggregate.of(Average())

    class Mergeable(Average):
        def merge(self, a: tuple[int, int], b: tuple[int, int]) -> tuple[int, int]:
            return (a[0] + b[0], a[1] + b[1])

    engine = Windowing(Tumbling(10), Aggregate.of(Mergeable()))
    store = engine.new_store()
    for t, v in [(1.0, 2), (5.0, 4), (12.0, 9)]:
        engine.add(store, t, v, -math.inf)
    assert [(f.start, f.result) for f in engine.fire(store, 10.0)] == [(0.0, 3.0)]


# -- slice edges ----------------------------------------------------------------------------------


def _brute_slice(windows: list[Any], ts: float) -> tuple[float, float]:
    reach = 2 * max(w.size + w.slide for w in windows)
    edges = sorted({e for w in windows for e in w.boundaries(ts - reach, ts + reach)})
    lo = max(e for e in edges if e <= ts)
    return lo, min(e for e in edges if e > ts)


@pytest.mark.parametrize("count", [1, 3, _SCALAR_LIMIT + 5])
def test_slice_edges_are_the_union_of_window_boundaries(count: int) -> None:
    rng = random.Random(count)
    windows: list[Any] = []
    for _ in range(count):
        slide = rng.choice([0.1, 0.3, 0.5, 0.7, 1.0, 2.5])
        windows.append(Sliding(rng.choice([0.3, 1.0, 1.3, 2.0, 3.7]), slide, offset=rng.choice([0.0, slide / 3])))
    edges = SliceEdges(windows)
    stamps = [round(rng.uniform(-50, 50), 1) for _ in range(300)] + [rng.uniform(-50, 50) for _ in range(300)]
    for ts in stamps:
        expected = _brute_slice(windows, ts)
        assert edges.slice_of(ts) == expected
        assert edges._slice_by_arithmetic(ts) == expected
    array = np.array(stamps)
    index, starts, ends = edges.slices_of(array)
    assert list(zip(starts[index].tolist(), ends[index].tolist())) == [_brute_slice(windows, t) for t in stamps]
    far = np.array([0.5, 1e6, 2e6 + 0.25])  # far more edges than rows: searched per progression
    index, starts, ends = edges.slices_of(far)
    assert list(zip(starts[index].tolist(), ends[index].tolist())) == [edges.slice_of(t) for t in far.tolist()]


def test_dyadic_queries_share_edge_progressions() -> None:
    """Tumbling(60) and Sliding(120, 60): ends fall on starts, one progression in all."""
    assert len(SliceEdges([Tumbling(60), Sliding(120, 60)]).progressions) == 1
    assert len(SliceEdges([Sliding(0.3, 0.1)]).progressions) == 2  # not exact: kept apart


# -- shared slices ----------------------------------------------------------------------------------


def test_queries_share_one_partial_per_slice() -> None:
    engine = Windowing({"10s": Tumbling(10), "10s/5s": Sliding(10, 5), "4s/2s": Sliding(4, 2)}, Count())
    store = engine.new_store()
    for t in range(10):
        assert engine.add(store, t + 0.5, None, -math.inf) is Admission.ON_TIME
    assert store.starts == [0.0, 2.0, 4.0, 5.0, 6.0, 8.0]  # edges of all three queries
    assert sum(store.partials.values()) == 10  # each record updated exactly one partial
    fired = engine.fire(store, 10.0)
    assert [(f.query, f.start, f.end, f.result) for f in fired if f.query != "4s/2s"] == [
        ("10s/5s", -5.0, 5.0, 5), ("10s", 0.0, 10.0, 10), ("10s/5s", 0.0, 10.0, 10)]
    assert [f.result for f in fired if f.query == "4s/2s"] == [2, 4, 4, 4, 4]


def test_slices_no_window_needs_are_freed() -> None:
    engine = Windowing(Sliding(60, 0.5), Sum(), allowed_lateness=5)
    store = engine.new_store()
    largest = 0
    for i in range(20_000):
        ts = i * 0.05
        watermark = ts - 2.0
        if engine.next_fire_time(store) <= watermark:
            engine.fire(store, watermark)
        engine.add(store, ts, 1, watermark)
        largest = max(largest, len(store.starts))
    assert largest <= 60 / 0.5 + (5 + 2) / 0.5 + 2  # the windows still open, no more
    engine.fire(store, math.inf)
    assert engine.is_empty(store)


# -- out of order and lateness (Scotty: late records update their slice) ----------------------------


def test_a_late_record_updates_its_slice_and_its_windows_fire_again() -> None:
    engine = Windowing({"t": Tumbling(10), "s": Sliding(10, 5)}, Count(), allowed_lateness=5)
    store = engine.new_store()
    for t in (1.0, 2.0, 11.0):
        engine.add(store, t, None, -math.inf)
    first = engine.fire(store, 10.0)
    assert [(f.query, f.start, f.end, f.result, f.firing) for f in first] == [
        ("s", -5.0, 5.0, 2, Firing.ON_TIME), ("t", 0.0, 10.0, 2, Firing.ON_TIME), ("s", 0.0, 10.0, 2, Firing.ON_TIME)]
    assert engine.add(store, 7.0, None, 10.0) is Admission.LATE_UPDATE  # within the lateness
    assert engine.next_fire_time(store) <= 10.0
    again = engine.fire(store, 11.0)
    assert [(f.query, f.start, f.end, f.result, f.firing) for f in again] == [
        ("t", 0.0, 10.0, 3, Firing.LATE_UPDATE), ("s", 0.0, 10.0, 3, Firing.LATE_UPDATE)]
    assert [(f.query, f.start, f.result) for f in engine.fire(store, 15.0)] == [("s", 5.0, 2)]
    # at 15, [0, 10) has closed (10 + lateness 5) and so have [-5, 5) and [0, 10) of "s": the record
    # at 3 is late for both; [5, 15) of "s" is still open and takes the record at 6
    assert engine.add(store, 3.0, None, 15.0) is Admission.LATE
    assert engine.late_queries(store, 3.0, 15.0) == ("t", "s")
    assert engine.add(store, 6.0, None, 15.0) is Admission.PARTLY_LATE  # [5, 15) of "s" still takes it
    assert engine.late_queries(store, 6.0, 15.0) == ("t",)


def test_records_must_not_skip_a_due_firing() -> None:
    engine = Windowing(Tumbling(10), Count())
    store = engine.new_store()
    engine.add(store, 1.0, None, -math.inf)
    with pytest.raises(FireFirst, match="fire"):
        engine.add(store, 5.0, None, 20.0)


# -- sessions -------------------------------------------------------------------------------------


@pytest.mark.parametrize("order", list(itertools.permutations([1.0, 5.0, 3.0, 20.0])))
def test_a_record_bridging_two_sessions_merges_them_in_any_order(order: tuple[float, ...]) -> None:
    engine = Windowing({"s": Session(2.5)}, Process())
    store = engine.new_store()
    for t in order:
        engine.add(store, t, t, -math.inf)
    assert [(f.start, f.end, f.result) for f in engine.fire(store, math.inf)] == [
        (1.0, 7.5, [1.0, 3.0, 5.0]), (20.0, 22.5, [20.0])]
    columnar = engine.new_store()
    engine.add_columns(lambda key: columnar, pa.array(["k"] * 4), pa.array(order), pa.array(order), -math.inf)
    assert engine.fire(columnar, math.inf) == engine.fire(_replay(engine, order), math.inf)


def _replay(engine: Windowing, order: tuple[float, ...]) -> Any:
    store = engine.new_store()
    for t in order:
        engine.add(store, t, t, -math.inf)
    return store


def test_a_late_record_merges_fired_sessions_into_a_new_window() -> None:
    engine = Windowing({"s": Session(2)}, Count(), allowed_lateness=10)
    store = engine.new_store()
    for t in (1.0, 5.0):
        engine.add(store, t, None, -math.inf)
    assert [(f.start, f.end) for f in engine.fire(store, 8.0)] == [(1.0, 3.0), (5.0, 7.0)]
    assert engine.add(store, 3.0, None, 8.0) is Admission.LATE_UPDATE
    assert [(f.start, f.end, f.result, f.firing) for f in engine.fire(store, 8.0)] == [
        (1.0, 7.0, 3, Firing.LATE_UPDATE)]
    assert engine.add(store, 0.0, None, 13.0) is Admission.LATE  # its own window [0, 2) closed at 12


# -- user-defined windows (Cutty) -----------------------------------------------------------------


def test_cutty_count_windows_share_slices() -> None:
    """Fig. 5.15: count windows 4/2 and 5/3 over one stream, sliced where any window begins or ends."""
    engine = Windowing({"4/2": CountWindows(4, 2), "5/3": CountWindows(5, 3)}, Process())
    store = engine.new_store()
    for i in range(12):
        engine.add(store, float(i), i, -math.inf)
    fired = engine.fire(store, math.inf)
    by_query: dict[str, list[list[int]]] = {}
    for f in fired:
        by_query.setdefault(f.query, []).append(f.result)
    assert by_query["4/2"] == [[0, 1, 2, 3], [2, 3, 4, 5], [4, 5, 6, 7], [6, 7, 8, 9]]
    assert by_query["5/3"] == [[0, 1, 2, 3, 4], [3, 4, 5, 6, 7], [6, 7, 8, 9, 10]]
    assert fired[0] == FiredWindow("4/2", 0.0, 4.0, [0, 1, 2, 3], Firing.ON_TIME)


def test_user_defined_windows_see_records_in_event_time_order() -> None:
    seen: list[float] = []

    class Spy(CountWindows):
        def on_record(self, state: int, timestamp: float, value: Any) -> tuple[int, int, int]:
            seen.append(timestamp)
            return super().on_record(state, timestamp, value)

    engine = Windowing(Spy(2, 2), Sum())
    store = engine.new_store()
    for t in (3.0, 1.0, 2.0, 0.0, 5.0, 4.0):
        engine.add(store, t, int(t), -math.inf)
    assert seen == []  # buffered until the watermark passes them
    assert [(f.start, f.end, f.result) for f in engine.fire(store, 4.5)] == [(0.0, 2.0, 1), (2.0, 4.0, 5)]
    assert seen == [0.0, 1.0, 2.0, 3.0, 4.0]


def test_a_window_function_ending_more_windows_than_are_open_is_named() -> None:
    class Broken(DeterministicWindow[None]):
        def initial_state(self) -> None:
            return None

        def on_record(self, state: None, timestamp: float, value: Any) -> tuple[None, int, int]:
            return None, 0, 1

    engine = Windowing({"bad": Broken()}, Count())
    store = engine.new_store()
    engine.add(store, 1.0, None, -math.inf)
    with pytest.raises(ValueError, match="'bad' .*Broken.* ended 1 windows"):
        engine.fire(store, 2.0)


# -- columnar input -------------------------------------------------------------------------------


def test_columnar_input_takes_arrow_times_key_indices_and_refuses_null_values() -> None:
    engine = Windowing(Tumbling(dt.timedelta(seconds=10)), Max())
    stores: dict[Any, Any] = {}
    stamps = pa.array([1_000, 4_000, 12_000, 3_000], pa.timestamp("ms"))
    result = engine.add_columns(lambda k: stores.setdefault(k, engine.new_store()), np.array([0, 1, 0, 0]),
                                stamps, pa.array([5, 7, 1, 9]), -math.inf)
    assert sorted(result.keys) == [0, 1] and len(result.late_rows) == 0
    assert [(f.start, f.result) for f in engine.fire(stores[0], 10.0)] == [(0.0, 9)]
    with pytest.raises(ValueError, match="row 1"):
        engine.add_columns(lambda k: stores.setdefault(k, engine.new_store()), pa.array(["a", "a"]),
                           pa.array([20.0, 21.0]), pa.array([1, None]), 10.0)


def test_columnar_late_rows_are_returned_with_their_queries() -> None:
    engine = Windowing({"t": Tumbling(10), "s": Session(1)}, Count(), allowed_lateness=1)
    stores: dict[Any, Any] = {}
    engine.add_columns(lambda k: stores.setdefault(k, engine.new_store()), pa.array(["a"]), pa.array([1.0]),
                       None, -math.inf)
    engine.fire(stores["a"], 12.0)
    result = engine.add_columns(lambda k: stores.setdefault(k, engine.new_store()), pa.array(["a", "a", "b"]),
                                pa.array([2.0, 12.5, 10.0]), None, 12.0)
    assert result.late_rows.tolist() == [0, 2]
    assert result.late_queries == [("t", "s"), ("s",)]
    assert result.late_update_keys == ["b"]  # [10, 20) of "t" counted it, behind the watermark


def test_stores_are_plain_picklable_values() -> None:
    engine = Windowing({"t": Tumbling(5), "s": Session(2), "c": CountWindows(3, 1)}, Process(),
                       allowed_lateness=3)
    store = engine.new_store()
    for t in (1.0, 2.0, 7.0, 3.0):
        engine.add(store, t, {"at": t}, 0.0)
    engine.fire(store, 4.0)
    copy = pickle.loads(pickle.dumps(store))
    assert copy == store
    assert engine.fire(copy, math.inf) == engine.fire(store, math.inf)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from([0.1, 0.25, 0.3, 0.5, 1.0, 2.5, 7.0]),
                          st.sampled_from([0.3, 0.5, 1.0, 1.3, 4.0, 10.0]), st.booleans()), min_size=1, max_size=16),
       st.lists(st.floats(-1e5, 1e5, allow_nan=False) | st.integers(-10**5, 10**5).map(lambda i: i / 10),
                min_size=1, max_size=40))
def test_slice_of_matches_the_boundaries_wherever_records_jump(specs: list[tuple[float, float, bool]],
                                                               stamps: list[float]) -> None:
    """The cached run of edges is rebuilt as timestamps jump around; every answer stays exact."""
    windows = [Sliding(size, slide, offset=slide / 2 if shifted else 0.0) for slide, size, shifted in specs]
    edges = SliceEdges(windows)
    for ts in stamps:
        assert edges.slice_of(ts) == _brute_slice(windows, ts)
