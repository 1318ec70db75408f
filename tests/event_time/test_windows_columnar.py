"""Windows on the columnar path's slice table (`runtime/windowing/table.py`) in real jobs.

Arrow batches with periodic queries and a count, sum, min or max go to one slice table per
subtask: these tests hold its emissions, re-firings and late records to the brute-force
reference on an exact watermark trace, mix record lists into it, crash and restore it (heap and
RocksDB backends), rescale it by restoring at another parallelism, and query it live.
"""

from __future__ import annotations

import math
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from epochal import (
    CheckpointConfig,
    JobFailedError,
    JobState,
    RestartStrategy,
    Source,
    SplitReader,
    StateConfig,
    StreamEnvironment,
    WatermarkStrategy,
)
from epochal.cluster.inprocess import InProcessExecutor
from epochal.runtime.operators.windows import KeyedWindowOperator, WindowMode
from epochal.state.keygroups import RoutingTable, key_group_of
from epochal.testing import CollectSink, Crash, ListSource
from epochal.windows import Sliding, Tumbling

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "windowing"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from reference import Reference  # noqa: E402
from scenarios import AGGREGATES, periodic_windows  # noqa: E402

from spark_jobs import EndlessSource, wait_until  # noqa: E402

_FIELD = {"count": None, "sum": "v", "min": "v", "max": "v"}


def _to_arrow(batch: Any) -> pa.RecordBatch:
    return pa.RecordBatch.from_pylist(batch) if isinstance(batch, list) else batch


def _windowed(stream: Any, queries: dict[str, Any], aggregate: str, lateness: float) -> Any:
    windowed = stream.key_by("k").windows(queries).allowed_lateness(lateness)
    if aggregate == "count":
        return windowed.count(name="windows")
    return getattr(windowed, aggregate)(_FIELD[aggregate], name="windows")


@pytest.fixture(autouse=True)
def _modes(monkeypatch: pytest.MonkeyPatch) -> list[WindowMode]:
    """Every test here must run the table: the modes window operators chose, checked after."""
    seen: list[WindowMode] = []
    snapshot = KeyedWindowOperator.snapshot
    on_watermark = KeyedWindowOperator.on_watermark

    def spy(self: KeyedWindowOperator, watermark: float) -> Any:
        seen.append(self._mode)
        return on_watermark(self, watermark)

    monkeypatch.setattr(KeyedWindowOperator, "on_watermark", spy)
    monkeypatch.setattr(KeyedWindowOperator, "snapshot", snapshot)
    yield seen
    assert seen and set(seen) <= {WindowMode.TABLE, WindowMode.UNDECIDED}, set(seen)
    assert WindowMode.TABLE in seen


@st.composite
def traces(draw: st.DrawFn) -> tuple[list[dict[str, Any]], dict[str, Any], str, float, float]:
    n = draw(st.integers(1, 40))
    jitter = draw(st.lists(st.sampled_from([0.0, 0.0, -0.5, -1.0, -2.5, -6.0]), min_size=n, max_size=n))
    keys = draw(st.lists(st.sampled_from("abc"), min_size=n, max_size=n))
    values = draw(st.lists(st.integers(-9, 9), min_size=n, max_size=n))
    records = [{"id": i, "k": k, "ts": max(0.0, i * 0.5 + j), "v": v}
               for i, (j, k, v) in enumerate(zip(jitter, keys, values))]
    queries = {f"q{i}": w for i, w in enumerate(draw(st.lists(periodic_windows(0.5), min_size=1, max_size=3)))}
    aggregate = draw(st.sampled_from(["count", "sum", "min", "max"]))
    return records, queries, aggregate, draw(st.sampled_from([0.0, 1.0])), draw(st.sampled_from([0.0, 1.5, 4.0]))


def _reference(records: list[dict[str, Any]], queries: dict[str, Any], aggregate: str, delay: float,
               lateness: float) -> tuple[Counter[Any], set[int]]:
    ref = Reference(queries, AGGREGATES[aggregate][1], lateness)
    emitted: Counter[Any] = Counter()
    late: set[int] = set()
    watermark = newest = -math.inf
    for r in records:
        if ref.record(r["k"], r["ts"], r["v"]):
            late.add(r["id"])
        newest = max(newest, r["ts"])
        if newest - delay > watermark:
            watermark = newest - delay
            emitted.update((k, q, s, e, res) for k, q, s, e, res, _ in ref.advance(watermark))
    emitted.update((k, q, s, e, res) for k, q, s, e, res, _ in ref.advance(math.inf))
    return emitted, late


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(traces())
def test_arrow_emissions_and_late_records_equal_the_reference_on_the_same_trace(trace: Any) -> None:
    """One record a batch: the watermark trace is exact, so re-firings and late records count."""
    records, queries, aggregate, delay, lateness = trace
    env = StreamEnvironment(parallelism=1, executor="inprocess")
    strategy = WatermarkStrategy.bounded_out_of_orderness(delay, timestamp="ts")
    events = env.from_source(ListSource(records, batch_size=1), watermarks=strategy).map_batches(_to_arrow)
    results = _windowed(events, queries, aggregate, lateness)
    got, late = CollectSink(), CollectSink()
    results.sink_to(got)
    results.late_records().sink_to(late)
    outcome = env.execute("windows")
    expected, expected_late = _reference(records, queries, aggregate, delay, lateness)
    assert Counter(got.committed()) == expected
    assert {r[0] for r in late.committed()} == expected_late  # Arrow rows come late as tuples
    assert outcome.operator("windows").late_records == len(expected_late)


def _records(n: int = 600) -> list[dict[str, Any]]:
    rows = [{"id": i, "k": f"u{i % 7}", "ts": i * 0.25, "v": i % 11} for i in range(n)]
    return [r for start in range(0, n, 4) for r in reversed(rows[start:start + 4])]  # disorder 0.75 s


def _final(records: list[dict[str, Any]], queries: dict[str, Any], aggregate: str) -> Counter[Any]:
    ref = Reference(queries, AGGREGATES[aggregate][1], 0.0)
    for r in sorted(records, key=lambda r: (r["ts"], r["id"])):
        ref.record(r["k"], r["ts"], r["v"])
    return Counter((k, q, s, e, res) for k, q, s, e, res, _ in ref.advance(math.inf))


_QUERIES = {"t": Tumbling(3.0), "s": Sliding(4.0, 1.5, offset=0.5)}


@pytest.mark.parametrize("aggregate", ["count", "sum", "max"])
def test_record_lists_after_arrow_batches_join_the_same_table(aggregate: str) -> None:
    """Arrow first, then a mix: record lists become columns of the same table."""
    records = _records()
    env = StreamEnvironment(parallelism=2, executor="inprocess")
    strategy = WatermarkStrategy.bounded_out_of_orderness(1.0, timestamp="ts")
    got = CollectSink()
    events = env.from_source(ListSource(records, splits=2, batch_size=5), watermarks=strategy).map_batches(
        lambda b: _to_arrow(b) if isinstance(b, list) and (b[0]["id"] % 3 or b[0]["id"] < 40) else b)
    _windowed(events, _QUERIES, aggregate, 0.0).sink_to(got)
    env.execute("mixed")
    assert Counter(got.committed()) == _final(records, _QUERIES, aggregate)


def _crash_job(tmp_path: Path, records: list[Any], backend: str, parallelism: int = 2, restarts: int = 2,
               sink: CollectSink | None = None) -> tuple[StreamEnvironment, CollectSink]:
    env = StreamEnvironment(
        parallelism=parallelism, executor="inprocess", restart=RestartStrategy(max_restarts=restarts),
        checkpoint=CheckpointConfig(interval=0.003, directory=str(tmp_path / "ckpt")),
        state=StateConfig(backend=backend),  # type: ignore[arg-type]
    )
    strategy = WatermarkStrategy.bounded_out_of_orderness(1.0, timestamp="ts")
    sink = sink or CollectSink()
    events = env.from_source(ListSource(records, splits=2, batch_size=9), watermarks=strategy).map_batches(_to_arrow)
    _windowed(events, _QUERIES, "sum", 0.0).sink_to(sink)
    return env, sink


def _with_crash(at: int) -> list[Any]:
    records: list[Any] = list(_records())
    records.insert(at, Crash())
    return records


@pytest.mark.parametrize("backend", ["memory", "disk"])
def test_a_crash_restores_the_table_and_commits_every_window_once(tmp_path: Path, backend: str) -> None:
    env, clean = _crash_job(tmp_path / "clean", _records(), backend)
    InProcessExecutor(seed=4, virtual_time=True).execute(env.job_graph("w"))
    assert Counter(clean.committed()) == _final(_records(), _QUERIES, "sum")
    env, crashed = _crash_job(tmp_path / "crash", _with_crash(450), backend)
    result = InProcessExecutor(seed=4, virtual_time=True).execute(env.job_graph("w"))
    assert result.restarts == 1 and result.restored_from[1] is not None
    assert Counter(crashed.committed()) == Counter(clean.committed())


def test_a_rescale_by_restore_moves_the_table_with_its_key_groups(tmp_path: Path) -> None:
    """Two subtasks fail after some checkpoints; three carry on from the latest one: what the
    first committed and what the second commits add up to the failure-free output."""
    records = _with_crash(450)  # the same list twice: the restored source skips the spent sentinel
    env, sink = _crash_job(tmp_path, records, "memory", parallelism=2, restarts=0)
    with pytest.raises(JobFailedError):
        InProcessExecutor(seed=4, virtual_time=True).execute(env.job_graph("w"))
    before = Counter(sink.committed())
    assert before, "no checkpoint completed before the crash"
    env, _ = _crash_job(tmp_path, records, "memory", parallelism=3, sink=sink)
    result = InProcessExecutor(seed=4, virtual_time=True).execute(env.job_graph("w"), from_checkpoint="latest")
    assert result.restored_from[0] is not None
    assert Counter(sink.committed()) == _final(_records(), _QUERIES, "sum")


def _rows(batch: Any) -> pa.RecordBatch:
    numbers = batch.column("value").to_pylist() if isinstance(batch, pa.RecordBatch) else batch
    return pa.RecordBatch.from_pylist([{"k": f"k{x % 3}", "ts": x * 0.01, "v": x} for x in numbers])


def test_a_live_query_of_a_key_reads_its_slices_from_the_table() -> None:
    """300 records, then an idle source: the key's slices as its `SliceStore` would hold them."""
    env = StreamEnvironment(parallelism=1, executor="inprocess")
    strategy = WatermarkStrategy.bounded_out_of_orderness(1000.0, timestamp="ts")  # nothing fires
    (env.from_source(EndlessSource(stop_at=300)).map_batches(_rows).assign_timestamps(strategy)
        .key_by("k").window(Tumbling(1.0)).sum("v", name="sums").sink_to(CollectSink()))
    handle = env.execute_async("live")
    expected = {float(t): sum(x for x in range(300) if x % 3 == 0 and int(x * 0.01) == t) for t in range(3)}
    try:
        wait_until(lambda: handle.query_state("sums", "k0", live=True).get("__window__") is not None
                   and handle.query_state("sums", "k0", live=True)["__window__"].partials == expected,
                   "k0's slices hold every record", 30)
        store = handle.query_state("sums", "k0", live=True)["__window__"]
        assert store.starts == [0.0, 1.0, 2.0] and store.ends == [1.0, 2.0, 3.0]
        assert handle.query_state("sums", "nobody", live=True) == {}
    finally:
        handle.cancel()


class _SlowSplit:
    split_id = "slow"


class _SlowReader(SplitReader):
    """`n` rows (k, ts, v) in event-time order, ten a read, a millisecond apart, as Arrow."""

    def __init__(self, n: int, position: int | None) -> None:
        self.n, self.next = n, position or 0

    def read(self, max_records: int) -> pa.RecordBatch | None:
        if self.next >= self.n:
            return None
        time.sleep(0.001)
        rows = range(self.next, min(self.n, self.next + 10))
        self.next = rows[-1] + 1
        return pa.RecordBatch.from_pylist([{"k": f"u{i % 7}", "ts": i * 0.25, "v": i % 11} for i in rows])

    def position(self) -> int:
        return self.next


class _Slow(Source):
    def __init__(self, n: int) -> None:
        self.n = n

    def splits(self) -> list[Any]:
        return [_SlowSplit()]

    def open_split(self, split: Any, position: Any | None) -> SplitReader:
        return _SlowReader(self.n, position)


@pytest.mark.parametrize("backend", ["memory", "disk"])
def test_live_migration_moves_the_table_with_its_key_groups(tmp_path: Path, backend: str) -> None:
    """Every used key group moves to the other running subtask and back (no restart): every
    window committed once."""
    n = 8000
    env = StreamEnvironment(parallelism=2, executor="inprocess", state=StateConfig(backend=backend),  # type: ignore[arg-type]
                            checkpoint=CheckpointConfig(interval=0.05, directory=str(tmp_path / "c")))
    sink = CollectSink()
    events = env.from_source(_Slow(n), watermarks=WatermarkStrategy.bounded_out_of_orderness(0.0, timestamp="ts"))
    _windowed(events, _QUERIES, "sum", 0.0).sink_to(sink)
    handle = env.execute_async("moved")
    wait_until(lambda: handle.status().state is JobState.RUNNING and bool(sink.committed()), "windows committed", 30)
    owners = RoutingTable.contiguous(2, 128).owners
    groups = sorted({key_group_of(f"u{i}") for i in range(7)})
    handle.move_key_groups({g: 1 - owners[g] for g in groups}, timeout=30)
    handle.move_key_groups({g: owners[g] for g in groups}, timeout=30)
    moved_at = len(sink.committed())
    result = handle.result(timeout=120)
    assert moved_at < len(sink.committed()), "the job ended before the key groups moved back"
    records = [{"id": i, "k": f"u{i % 7}", "ts": i * 0.25, "v": i % 11} for i in range(n)]
    assert Counter(sink.committed()) == _final(records, _QUERIES, "sum")
    assert result.restarts == 0 and result.restored_from == (None,)


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(traces())
def test_a_local_phase_per_key_and_slice_emits_what_records_would(trace: Any) -> None:
    """`combine=True` (every aggregate; count and sum have it by default): partials per key and
    slice cross the exchange, and every window fires and re-fires as the reference does on the
    same exact watermark trace (one record a batch, the local phase shipping before each
    watermark); late rows are counted, not emitted."""
    from epochal.plan.aggregates import LocalWindowSpec

    records, queries, aggregate, delay, lateness = trace
    env = StreamEnvironment(parallelism=1, executor="inprocess")
    strategy = WatermarkStrategy.bounded_out_of_orderness(delay, timestamp="ts")
    events = env.from_source(ListSource(records, batch_size=1), watermarks=strategy).map_batches(_to_arrow)
    windowed = events.key_by("k").windows(queries).allowed_lateness(lateness)
    if aggregate == "count":
        results = windowed.count(name="windows", combine=True)
    else:
        results = getattr(windowed, aggregate)(_FIELD[aggregate], name="windows", combine=True)
    got = CollectSink()
    results.sink_to(got)
    assert any(isinstance(s, LocalWindowSpec) for v in env.job_graph("j").vertices for s in v.chain)
    outcome = env.execute("local-windows")
    expected, expected_late = _reference(records, queries, aggregate, delay, lateness)
    assert Counter(got.committed()) == expected
    late = outcome.operator("windows").late_records  # late partial rows: records of one slice count once
    assert (late > 0) == bool(expected_late) and late <= len(expected_late)


def test_late_records_asked_for_keep_the_records_path() -> None:
    from epochal.plan.aggregates import LocalWindowSpec

    env = StreamEnvironment(parallelism=2, executor="inprocess")
    strategy = WatermarkStrategy.bounded_out_of_orderness(0.0, timestamp="ts")
    events = env.from_source(ListSource(_records(), splits=2), watermarks=strategy).map_batches(_to_arrow)
    results = events.key_by("k").window(Tumbling(3.0)).count(name="windows")
    results.sink_to(CollectSink())
    assert any(isinstance(s, LocalWindowSpec) for v in env.job_graph("j").vertices for s in v.chain)
    results.late_records().sink_to(CollectSink())  # late records are records: no partials
    assert not any(isinstance(s, LocalWindowSpec) for v in env.job_graph("j2").vertices for s in v.chain)
    env.execute("late")
