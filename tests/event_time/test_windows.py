"""Windows end to end: the keyed window operator in real jobs, against a brute-force reference.

With one source split read a record at a time on one subtask, the watermark trace is exact
(after each record: the largest timestamp so far less the delay), so every emission, re-firing
and late record can be compared with `tests/windowing/reference.py` run on the same trace. With
more subtasks and batches the trace changes, so those tests use input whose disorder stays
within the delay (nothing late): then every window fires once, with its final result.
"""

from __future__ import annotations

import math
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from epochal import CheckpointConfig, RestartStrategy, StreamEnvironment, WatermarkStrategy
from epochal.cluster.inprocess import InProcessExecutor
from epochal.testing import CollectSink, Crash, ListSource
from epochal.windows import DeterministicWindow, ProcessWindowFunction, Session, Sliding, Tumbling

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "windowing"))
from reference import Reference  # noqa: E402
from scenarios import AGGREGATES, any_window  # noqa: E402

_FIELD = {"count": None, "sum": "v", "min": "v", "max": "v"}


def _windowed(stream: Any, queries: dict[str, Any], aggregate: str, lateness: float) -> Any:
    windowed = stream.key_by("k").windows(queries).allowed_lateness(lateness)
    if aggregate == "count":
        return windowed.count()
    return getattr(windowed, aggregate)(_FIELD[aggregate])


@st.composite
def traces(draw: st.DrawFn) -> tuple[list[dict[str, Any]], dict[str, Any], str, float, float]:
    n = draw(st.integers(1, 40))
    base = [i * 0.5 for i in range(n)]
    jitter = draw(st.lists(st.sampled_from([0.0, 0.0, -0.5, -1.0, -2.5, -6.0]), min_size=n, max_size=n))
    keys = draw(st.lists(st.sampled_from("ab"), min_size=n, max_size=n))
    values = draw(st.lists(st.integers(0, 9), min_size=n, max_size=n))
    records = [{"id": i, "k": k, "ts": max(0.0, t + j), "v": v}
               for i, (t, j, k, v) in enumerate(zip(base, jitter, keys, values))]
    names = draw(st.lists(st.sampled_from(["q1", "q2", "q3"]), min_size=1, max_size=3, unique=True))
    queries = {name: draw(any_window(0.5)) for name in names}
    # user-defined windows read the value the aggregate reads: a count reads whole records
    user_defined = any(isinstance(q, DeterministicWindow) for q in queries.values())
    aggregate = draw(st.sampled_from(["sum", "min", "max"] if user_defined else ["count", "sum", "min", "max"]))
    return records, queries, aggregate, draw(st.sampled_from([0.0, 1.0])), draw(st.sampled_from([0.0, 1.5, 4.0]))


def _reference(records: list[dict[str, Any]], queries: dict[str, Any], aggregate: str, delay: float,
               lateness: float) -> tuple[Counter[Any], set[int]]:
    ref = Reference(queries, AGGREGATES[aggregate][1], lateness)
    emitted: Counter[Any] = Counter()
    late: set[int] = set()
    watermark = -math.inf
    newest = -math.inf
    for r in records:
        if ref.record(r["k"], r["ts"], r["v"]):
            late.add(r["id"])
        newest = max(newest, r["ts"])
        if newest - delay > watermark:  # the source sends a watermark when it moves
            watermark = newest - delay
            emitted.update((k, q, s, e, res) for k, q, s, e, res, _ in ref.advance(watermark))
    emitted.update((k, q, s, e, res) for k, q, s, e, res, _ in ref.advance(math.inf))
    return emitted, late


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(traces())
def test_emissions_and_late_records_equal_the_reference_on_the_same_trace(trace: Any) -> None:
    records, queries, aggregate, delay, lateness = trace
    env = StreamEnvironment(parallelism=1, executor="inprocess")
    strategy = WatermarkStrategy.bounded_out_of_orderness(delay, timestamp="ts")
    events = env.from_source(ListSource(records, batch_size=1), watermarks=strategy)
    results = _windowed(events, queries, aggregate, lateness)
    got, late = CollectSink(), CollectSink()
    results.sink_to(got)
    results.late_records().sink_to(late)
    env.execute("windows")
    expected, expected_late = _reference(records, queries, aggregate, delay, lateness)
    assert Counter(got.committed()) == expected
    assert {r["id"] for r in late.committed()} == expected_late


def _final_windows(records: list[dict[str, Any]], size: float, slide: float) -> Counter[Any]:
    """Counts of every sliding window by its definition (nothing is late)."""
    out: Counter[Any] = Counter()
    for r in records:
        k = math.floor(r["ts"] / slide)
        while k * slide > r["ts"] - size:
            out[(r["k"], k * slide, k * slide + size)] += 1
            k -= 1
    return Counter({(key, s, e, c): 1 for (key, s, e), c in out.items()})


def _in_order_records(n: int = 400, disorder: int = 3) -> list[dict[str, Any]]:
    rows = [{"k": f"u{i % 5}", "ts": i * 0.25, "v": i % 7} for i in range(n)]
    block = disorder + 1
    return [r for start in range(0, n, block) for r in reversed(rows[start : start + block])]


@pytest.mark.parametrize("parallelism,batch", [(1, 1), (2, 7), (3, 64), (4, 5)])
def test_results_do_not_depend_on_parallelism_or_batching(parallelism: int, batch: int) -> None:
    records = _in_order_records()
    env = StreamEnvironment(parallelism=parallelism, executor="inprocess")
    strategy = WatermarkStrategy.bounded_out_of_orderness(1.0, timestamp="ts")  # disorder: 0.75 s
    sink = CollectSink()
    (env.from_source(ListSource(records, splits=parallelism, batch_size=batch), watermarks=strategy)
        .key_by("k").window(Sliding(size=5.0, slide=1.5)).count().sink_to(sink))
    result = InProcessExecutor(seed=parallelism).execute(env.job_graph("sliding"))
    assert result.restarts == 0
    assert Counter(sink.committed()) == _final_windows(records, 5.0, 1.5)


@st.composite
def bounded_runs(draw: st.DrawFn) -> tuple[list[dict[str, Any]], dict[str, Any], str, int, int]:
    """Records whose disorder stays within the watermark delay (nothing is late), random queries,
    parallelism 1-4 and batch sizes: every window fires once, with its final result."""
    n = draw(st.integers(1, 60))
    # distinct times: records with equal times reach a subtask in an order that depends on the
    # parallelism, and a user-defined window (punctuation) depends on that order
    jitter = draw(st.lists(st.sampled_from([0.0, 0.0, -0.1, -0.3, -0.7]), min_size=n, max_size=n))
    keys = draw(st.lists(st.sampled_from("abc"), min_size=n, max_size=n))
    values = draw(st.lists(st.integers(0, 9), min_size=n, max_size=n))
    records = [{"id": i, "k": k, "ts": 1.0 + i * 0.5 + j, "v": v}
               for i, (j, k, v) in enumerate(zip(jitter, keys, values))]
    names = draw(st.lists(st.sampled_from(["q1", "q2", "q3"]), min_size=1, max_size=3, unique=True))
    queries = {name: draw(any_window(0.5)) for name in names}
    user_defined = any(isinstance(q, DeterministicWindow) for q in queries.values())
    aggregate = draw(st.sampled_from(["sum", "min", "max"] if user_defined else ["count", "sum", "min", "max"]))
    return records, queries, aggregate, draw(st.integers(1, 4)), draw(st.sampled_from([1, 3, 16]))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(bounded_runs())
def test_final_results_equal_the_reference_at_any_parallelism_and_batching(run: Any) -> None:
    records, queries, aggregate, parallelism, batch = run
    env = StreamEnvironment(parallelism=parallelism, executor="inprocess")
    strategy = WatermarkStrategy.bounded_out_of_orderness(1.0, timestamp="ts")  # disorder: at most 1 s
    got = CollectSink()
    (_windowed(env.from_source(ListSource(records, splits=parallelism, batch_size=batch), watermarks=strategy),
               queries, aggregate, 0.0)
        .sink_to(got))
    env.execute("windows")
    ref = Reference(queries, AGGREGATES[aggregate][1], 0.0)
    for r in sorted(records, key=lambda r: (r["ts"], r["id"])):  # by definition: in event-time order
        ref.record(r["k"], r["ts"], r["v"])
    expected = Counter((k, q, s, e, res) for k, q, s, e, res, _ in ref.advance(math.inf))
    assert Counter(got.committed()) == expected


def test_the_columnar_path_equals_the_per_record_path() -> None:
    records = _in_order_records()
    strategy = WatermarkStrategy.bounded_out_of_orderness(1.0, timestamp="ts")
    outputs = []
    for columnar in (False, True):
        env = StreamEnvironment(parallelism=2, executor="inprocess")
        sink = CollectSink()
        source = env.from_source(ListSource(records, splits=2, batch_size=50), watermarks=strategy)
        if columnar:  # Arrow batches all the way into the window operator
            source = source.map_batches(lambda b: b)
        source.key_by("k").windows({"t": Tumbling(3.0), "s": Sliding(4.0, 1.0)}).sum("v").sink_to(sink)
        env.execute("columnar" if columnar else "records")
        batches = sink.committed()
        outputs.append(Counter(batches))
    assert outputs[0] == outputs[1]


class _Spread(ProcessWindowFunction):
    def process(self, key: Any, window: Any, records: list[Any]) -> Any:
        values = [r["v"] for r in records]
        yield (key, window.start, window.end, max(values) - min(values), len(values))


def test_sessions_and_process_window_functions() -> None:
    records = [{"k": "a", "ts": t, "v": v} for t, v in [(0, 1), (2, 5), (20, 3), (3, 9), (21, 4), (40, 7)]]
    env = StreamEnvironment(parallelism=1, executor="inprocess")
    strategy = WatermarkStrategy.bounded_out_of_orderness(5.0, timestamp="ts")
    sink, late = CollectSink(), CollectSink()
    sessions = (env.from_source(ListSource(records, batch_size=1), watermarks=strategy)
                .key_by("k").window(Session(gap=4.0)).process(_Spread()))
    sessions.sink_to(sink)
    sessions.late_records().sink_to(late)
    env.execute("sessions")
    # the click at 3 comes after the watermark reached 15: its session [0, 6) had closed
    assert sorted(sink.committed()) == [("a", 0.0, 6.0, 4, 2), ("a", 20.0, 25.0, 1, 2), ("a", 40.0, 44.0, 0, 1)]
    assert late.committed() == [{"k": "a", "ts": 3, "v": 9}]


def test_windows_need_event_time() -> None:
    from epochal.errors import GraphError

    env = StreamEnvironment(parallelism=1, executor="inprocess")
    with pytest.raises(GraphError, match="event time"):
        env.from_source(ListSource([1])).key_by(lambda x: x).window(Tumbling(1)).count()


def _crash_job(tmp_path: Path, crash_at: int | None) -> tuple[StreamEnvironment, CollectSink]:
    records: list[Any] = list(_in_order_records(600))
    if crash_at is not None:
        records.insert(crash_at, Crash())
    env = StreamEnvironment(
        parallelism=2, executor="inprocess", restart=RestartStrategy(max_restarts=2),
        checkpoint=CheckpointConfig(interval=0.003, directory=str(tmp_path / "ckpt")),
    )
    strategy = WatermarkStrategy.bounded_out_of_orderness(1.0, timestamp="ts")
    sink = CollectSink()
    (env.from_source(ListSource(records, splits=2, batch_size=9), watermarks=strategy)
        .key_by("k").windows({"t": Tumbling(2.0), "s": Session(0.6)}).count().sink_to(sink))
    return env, sink


def test_a_crash_during_windowing_commits_every_window_once(tmp_path: Path) -> None:
    env, clean = _crash_job(tmp_path / "clean", None)
    InProcessExecutor(seed=4, virtual_time=True).execute(env.job_graph("w"))
    env, crashed = _crash_job(tmp_path / "crash", 450)
    result = InProcessExecutor(seed=4, virtual_time=True).execute(env.job_graph("w"))
    assert result.restarts == 1 and result.restored_from[1] is not None
    assert Counter(crashed.committed()) == Counter(clean.committed())


def test_window_results_are_arrow_on_the_columnar_path() -> None:
    env = StreamEnvironment(parallelism=1, executor="inprocess")
    strategy = WatermarkStrategy.for_monotonous_timestamps(timestamp="ts")
    seen: list[type] = []

    def spy(batch: pa.RecordBatch) -> pa.RecordBatch:
        seen.append(type(batch))
        return batch

    sink = CollectSink()
    table = pa.table({"k": ["a", "b", "a"], "ts": [0.0, 1.0, 2.5]})
    (env.from_source(ListSource(table.to_pylist()), watermarks=strategy)
        .map_batches(lambda b: b).key_by("k").window(Tumbling(2.0)).count()
        .map_batches(spy).sink_to(sink))
    env.execute("arrow")
    assert seen and all(t is pa.RecordBatch for t in seen)
    assert sorted(sink.committed()) == [("a", 0.0, 2.0, 1), ("a", 2.0, 4.0, 1), ("b", 0.0, 2.0, 1)]


def test_late_records_are_counted_whether_or_not_anyone_asked_for_them() -> None:
    records = [{"k": "a", "ts": t} for t in (0.0, 10.0, 1.0, 11.0, 2.0)]  # 1.0 and 2.0 are late
    for ask in (False, True):
        env = StreamEnvironment(parallelism=1, executor="inprocess")
        strategy = WatermarkStrategy.for_monotonous_timestamps(timestamp="ts")
        results = (env.from_source(ListSource(records, batch_size=1), watermarks=strategy)
                   .key_by("k").window(Tumbling(5.0)).count(name="per5s"))
        results.sink_to(CollectSink())
        late = CollectSink()
        if ask:
            results.late_records().sink_to(late)
        outcome = env.execute("late")
        assert outcome.operator("per5s").late_records == 2
        assert [r["ts"] for r in late.committed()] == ([1.0, 2.0] if ask else [])


class _Records(ProcessWindowFunction):
    def process(self, key: Any, window: Any, records: Any) -> Any:
        return [(key, window.start, sorted(records))]


def _to_arrow(batch: Any) -> pa.RecordBatch:
    return pa.RecordBatch.from_pylist(batch) if isinstance(batch, list) else batch


@pytest.mark.parametrize("how", ["process", "reduce"])
def test_functions_of_whole_records_see_arrow_rows_as_tuples(how: str) -> None:
    """A window function of the record (no value column) on Arrow input gets each row as a tuple,
    as the per-record path gives an Arrow row; never None."""
    records = [{"k": f"u{i % 3}", "ts": i * 0.5, "v": i} for i in range(60)]
    got = {}
    for columnar in (True, False):
        env = StreamEnvironment(parallelism=2, executor="inprocess")
        sink = CollectSink()
        rows = [(r["k"], r["ts"], r["v"]) for r in records]
        events = env.from_source(ListSource(records if columnar else rows, splits=2, batch_size=7),
                                 watermarks=WatermarkStrategy.bounded_out_of_orderness(
                                     0.0, timestamp="ts" if columnar else (lambda r: r[1])))
        keyed = (events.map_batches(_to_arrow).key_by("k") if columnar else events.key_by(lambda r: r[0]))
        windowed = keyed.window(Tumbling(5.0))
        if how == "process":
            windowed.process(_Records()).sink_to(sink)
        else:
            windowed.reduce(lambda a, b: a if a[2] >= b[2] else b).sink_to(sink)
        env.execute("rows")
        got[columnar] = sorted(map(repr, sink.committed()))
    assert got[True] == got[False] and "None" not in got[True][0]
