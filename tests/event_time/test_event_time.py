"""Event time end to end: watermarks from sources, through shuffles, to event-time timers."""

from __future__ import annotations

import datetime as dt
import math
import time
from collections.abc import Iterable
from typing import Any

import pyarrow as pa
import pytest

from epochal import (
    CheckpointConfig,
    JobCancelledError,
    KeyedProcessFunction,
    OperatorError,
    RestartStrategy,
    Source,
    SplitReader,
    StreamEnvironment,
    WatermarkStrategy,
)
from epochal.cluster.inprocess import InProcessExecutor
from epochal.testing import CollectSink, Crash, ListSource
from epochal.windows import Tumbling

N = 300


def _events(disorder: int = 0) -> list[tuple[str, float]]:
    """(key, ts): timestamps rise by 1, each block of `disorder + 1` reversed (bounded delay)."""
    out = [(f"k{i % 4}", float(i)) for i in range(N)]
    if disorder:
        block = disorder + 1
        out = [e for start in range(0, N, block) for e in reversed(out[start : start + block])]
    return out


class FireAtEventTime(KeyedProcessFunction):
    """Registers a timer at each record's time + 10; when it fires, emits (key, ts, watermark)."""

    def process_element(self, value: Any, ctx: Any) -> Iterable[Any]:
        assert value[1] >= ctx.current_watermark(), "a record older than the watermark is late"
        ctx.timers.register_event_time(value[1] + 10)
        return ()

    def on_timer(self, timestamp: float, ctx: Any) -> Iterable[Any]:
        assert ctx.time_domain.value == "event_time"
        yield (ctx.key, timestamp, ctx.current_watermark())


def _job(
    tmp_path: Any, *, disorder: int = 0, delay: float = 0.0, parallelism: int = 2, crash_at: int | None = None
) -> tuple[StreamEnvironment, CollectSink]:
    env = StreamEnvironment(
        parallelism=parallelism,
        checkpoint=CheckpointConfig(interval=0.003, directory=str(tmp_path / "ckpt")),
        executor="inprocess",
        restart=RestartStrategy(max_restarts=2),
    )
    items: list[Any] = list(_events(disorder))
    if crash_at is not None:
        items.insert(crash_at, Crash())
    strategy = WatermarkStrategy.bounded_out_of_orderness(delay, timestamp=1)
    sink = CollectSink()
    (env.from_source(ListSource(items, splits=4, batch_size=7), watermarks=strategy)
        .key_by(lambda e: e[0]).process(FireAtEventTime()).sink_to(sink))
    return env, sink


def _run(env: StreamEnvironment, seed: int = 0) -> Any:
    return InProcessExecutor(seed=seed, virtual_time=True).execute(env.job_graph("event-time"))


@pytest.mark.parametrize("parallelism", [1, 2, 3])
def test_event_time_timers_fire_once_the_watermark_passes_them(tmp_path: Any, parallelism: int) -> None:
    env, sink = _job(tmp_path, parallelism=parallelism)
    _run(env, seed=parallelism)
    fired = sink.committed()
    assert sorted((k, t) for k, t, _ in fired) == sorted((k, ts + 10) for k, ts in _events())
    assert all(watermark >= t for _, t, watermark in fired)
    # the watermark moved during the run: timers did not all wait for the end of the input
    assert sum(1 for *_, watermark in fired if math.isfinite(watermark)) > N // 5


def test_bounded_disorder_within_the_delay_is_never_late(tmp_path: Any) -> None:
    env, sink = _job(tmp_path, disorder=3, delay=3.0)  # the asserts in the function check it
    _run(env, seed=1)
    assert len(sink.committed()) == N


def test_a_crash_restores_watermarks_and_timers_exactly_once(tmp_path: Any) -> None:
    clean_env, clean = _job(tmp_path / "clean")
    _run(clean_env, seed=2)
    crash_env, crashed = _job(tmp_path / "crash", crash_at=200)
    result = _run(crash_env, seed=2)
    assert result.restarts == 1 and result.restored_from[1] is not None
    assert sorted((k, t) for k, t, _ in crashed.committed()) == sorted((k, t) for k, t, _ in clean.committed())


def test_a_record_without_a_timestamp_names_the_operator_and_the_record() -> None:
    env = StreamEnvironment(parallelism=1, executor="inprocess", restart=RestartStrategy.none())
    strategy = WatermarkStrategy.for_monotonous_timestamps(timestamp="ts")
    records = [{"ts": 1.0}, {"ts": "noon"}]
    env.from_source(ListSource(records), watermarks=strategy, name="events").sink_to(CollectSink())
    with pytest.raises(Exception) as failed:
        env.execute("bad-time")
    error = failed.value if isinstance(failed.value, OperatorError) else failed.value.__cause__
    assert isinstance(error, OperatorError)
    assert "events" in str(error) and "noon" in str(error)


def test_arrow_timestamp_columns_and_datetimes_are_times() -> None:
    from epochal.plan.time import EventTime, time_of

    batch = pa.RecordBatch.from_pydict(
        {"ts": pa.array([0, 1_500], pa.timestamp("ms")), "d": pa.array([dt.date(1970, 1, 2)] * 2)}
    )
    assert EventTime(field="ts").of_arrow(batch).tolist() == [0.0, 1.5]
    assert EventTime(field="d").of_arrow(batch).tolist() == [86_400.0, 86_400.0]
    assert time_of(dt.datetime(1970, 1, 1, 0, 1, tzinfo=dt.UTC)) == 60.0


class _AtWatermark(KeyedProcessFunction):
    def process_element(self, value: Any, ctx: Any) -> Iterable[Any]:
        ctx.timers.register_event_time(value["at"])
        return ()

    def on_timer(self, timestamp: float, ctx: Any) -> Iterable[Any]:
        yield (ctx.key, timestamp, ctx.current_watermark())


def test_assign_timestamps_makes_watermarks_mid_stream() -> None:
    env = StreamEnvironment(parallelism=2, executor="inprocess")
    sink = CollectSink()
    (env.from_source(ListSource(_events(), splits=2))
        .map(lambda e: {"key": e[0], "at": e[1]})
        .assign_timestamps(WatermarkStrategy.for_monotonous_timestamps(timestamp="at"))
        .key_by("key").process(_AtWatermark()).sink_to(sink))
    env.execute("assign")
    fired = sink.committed()
    assert len(fired) == N and all(w >= t for _, t, w in fired)


def test_a_loop_does_not_hold_back_the_watermark_downstream_of_it() -> None:
    """Records go round a loop several times; the watermark passes the loop once, from its input,
    so event-time timers downstream of the loop fire while the job runs, not only at its end."""
    env = StreamEnvironment(parallelism=2, executor="inprocess")
    records = [(f"k{i % 3}", float(i), 16) for i in range(N)]  # (key, ts, rounds left)

    def body(loop: Any) -> Any:
        halved = loop.map(lambda r: (r[0], r[1], r[2] // 2), name="halve")
        return halved.filter(lambda r: r[2] > 0, name="again"), halved.filter(lambda r: r[2] == 0, name="done")

    sink = CollectSink()
    (env.from_source(ListSource(records, splits=2, batch_size=5),
                     watermarks=WatermarkStrategy.for_monotonous_timestamps(timestamp=1))
        .iterate(body, name="rounds")
        .key_by(lambda r: r[0]).process(_AtTime()).sink_to(sink))
    env.execute("loop-time")
    fired = sink.committed()
    assert sorted(t for _, t, _ in fired) == [float(i) + 100 for i in range(N)]
    assert any(math.isfinite(w) for *_, w in fired), "the loop held the watermark back until the end"


class _AtTime(KeyedProcessFunction):
    def process_element(self, value: Any, ctx: Any) -> Iterable[Any]:
        ctx.timers.register_event_time(value[1] + 100)
        return ()

    def on_timer(self, timestamp: float, ctx: Any) -> Iterable[Any]:
        yield (ctx.key, timestamp, ctx.current_watermark())


class _SlowSplitSource:
    """Split "fast" has records at once; split "slow" has nothing for a while (empty batches),
    then its own records: with idleness, the watermark moves on without waiting for it."""

    def __init__(self, quiet_polls: int) -> None:
        self.quiet_polls = quiet_polls

    def splits(self) -> list[Any]:
        return [_Split("fast"), _Split("slow")]

    def open_split(self, split: Any, position: Any) -> Any:
        return _SlowReader(split.split_id, self.quiet_polls, position or 0)


class _Split:
    def __init__(self, split_id: str) -> None:
        self.split_id = split_id


class _SlowReader:
    def __init__(self, split_id: str, quiet: int, position: int) -> None:
        self.split_id, self.quiet, self.pos, self.polls = split_id, quiet, position, 0

    def read(self, max_records: int) -> Any:
        self.polls += 1
        if self.split_id == "slow" and self.polls <= self.quiet:
            return []  # nothing yet
        rows = list(range(self.pos, min(self.pos + 5, 100)))
        if not rows:
            return None
        self.pos += len(rows)
        base = 0.0 if self.split_id == "fast" else 1000.0
        return [(self.split_id, base + r) for r in rows]

    def position(self) -> int:
        return self.pos

    def close(self) -> None:
        pass


def test_an_idle_split_stops_holding_the_watermark_back() -> None:
    """The slow split is idle while the fast one runs: with idleness the fast split's timers fire
    while the slow split is quiet; without it they wait for the slow split's first records."""
    seen: dict[bool, list[Any]] = {}
    for idleness in (False, True):
        env = StreamEnvironment(parallelism=1, executor="inprocess")
        strategy = WatermarkStrategy.for_monotonous_timestamps(timestamp=1)
        if idleness:
            strategy = strategy.with_idleness(0.05)
        sink = CollectSink()
        (env.from_source(_SlowSplitSource(quiet_polls=20_000), watermarks=strategy)  # type: ignore[arg-type]
            .key_by(lambda r: r[0]).process(_FastTimers()).sink_to(sink))
        InProcessExecutor(seed=0, virtual_time=True, step_time=0.0001).execute(env.job_graph("idle"))
        seen[idleness] = sink.committed()
    fast_with, fast_without = ([w for k, _, w in seen[i] if k == "fast"] for i in (True, False))
    assert any(math.isfinite(w) and w < 1000 for w in fast_with), "idleness let the watermark move"
    assert not any(math.isfinite(w) and w < 1000 for w in fast_without), "without idleness it waits"


class _FastTimers(KeyedProcessFunction):
    def process_element(self, value: Any, ctx: Any) -> Iterable[Any]:
        ctx.timers.register_event_time(value[1] + 1)
        return ()

    def on_timer(self, timestamp: float, ctx: Any) -> Iterable[Any]:
        yield (ctx.key, timestamp, ctx.current_watermark())


class _QuietAfter(Source):
    """Two splits of `(key, timestamp)` records that then stay open with nothing more to read:
    an unbounded input gone quiet, like a watched directory read to its last file."""

    def __init__(self, busy: int, quiet: int) -> None:
        self.lengths = {"busy": busy, "quiet": quiet}

    def splits(self) -> list[Any]:
        return [_Named(name) for name in self.lengths]

    def open_split(self, split: Any, position: Any | None) -> SplitReader:
        return _QuietAfterReader(split.split_id, self.lengths[split.split_id], position or 0)


class _Named:
    def __init__(self, split_id: str) -> None:
        self.split_id = split_id


class _QuietAfterReader(SplitReader):
    def __init__(self, name: str, length: int, position: int) -> None:
        self.name, self.length, self.next = name, length, position

    def read(self, max_records: int) -> list[Any]:
        out = [(self.name, float(t)) for t in range(self.next, min(self.length, self.next + max_records))]
        self.next += len(out)
        return out

    def position(self) -> int:
        return self.next

    def retry_after(self) -> float:
        return 0.05


def test_assign_timestamps_goes_idle_when_its_input_goes_quiet(tmp_path: Any) -> None:
    """The subtask that read the short split receives nothing more; with idleness its assigner
    says so on its own (a processing-time wake-up), and the busy subtask's windows fire."""
    checkpoints = CheckpointConfig(interval=0.1, directory=str(tmp_path))
    env = StreamEnvironment(parallelism=2, executor="inprocess", checkpoint=checkpoints)
    sink = CollectSink()
    timed = env.from_source(_QuietAfter(busy=100, quiet=1)).assign_timestamps(
        WatermarkStrategy.bounded_out_of_orderness(5.0, timestamp=1).with_idleness(0.2)
    )
    timed.key_by(lambda r: r[0]).window(Tumbling(10)).count().sink_to(sink)
    handle = env.execute_async("quiet")
    deadline = time.monotonic() + 60
    while len(sink.committed()) < 9 and time.monotonic() < deadline and not handle.done():
        time.sleep(0.02)
    handle.cancel()
    with pytest.raises(JobCancelledError):
        handle.result(timeout=30)
    busy = sorted(row for row in sink.committed() if row[0] == "busy")
    assert busy == [("busy", float(s), float(s + 10), 10) for s in range(0, 90, 10)]  # [90, 100) is open
