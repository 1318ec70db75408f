"""Joins: the window join on shared slices against a per-window join, and the interval join
against Spark Structured Streaming's stream-stream join on the same events.

**Window join.** Two streams of `(key, time, id)` records, joined by key within sliding windows of
10 s sliding by 10, 5, 2 and 1 s (1, 2, 5 and 10 windows per record), in one in-process job each
way: Epochal's `join(...).window(...)`, which keeps each record once in the slice holding it, and
the same join as Flink's `JoinedStreams` does it, written as a `KeyedCoProcessFunction`
(`PerWindowJoin`): each record copied into the buffer of every window it belongs to, a window's
pairs emitted from its own buffers at its end. Both emit the same pairs (checked on a small run
first); the benchmark reports records per second and the state a full checkpoint writes at its
largest (`StateConfig(incremental=False)`, so every checkpoint's size is the whole state).

**Interval join.** Nexmark's auctions and bids, the bids of an auction within its first
`BOUND_S` seconds (`bid.dateTime BETWEEN auction.dateTime AND auction.dateTime + BOUND_S`), read
by both systems from the same Parquet files (written once, `benchmarks.nexmark.write_events`):
Epochal's `interval_join(...).between(0, BOUND_S)` in process (the files read one after the
other, `ParquetSource(in_order=True)`, by one source subtask, as Spark reads one file per
micro-batch; the join at 2 subtasks), and Spark SS's stream-stream inner join with watermarks on
both sides and the same time range (local[2], one file per micro-batch, `availableNow`), both to
a sink that keeps nothing. State: the largest full checkpoint of Epochal's join and the rows it
held then, against Spark's state store rows and memory (`stateOperators` of its progress
reports, at their largest).

    python -m benchmarks run joins [--quick]
"""

from __future__ import annotations

import random
import shutil
import tempfile
import time
from collections import Counter
from collections.abc import Iterable
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from .runner import benchmark, pyplot, save_figure
from .spark_subprocess import run_on_spark

SIZE = 10.0  # the window's length, seconds
SLIDES = (10.0, 5.0, 2.0, 1.0)
KEYS = 400
SPAN = 600.0  # seconds of event time
BOUND_S = 0.5  # the interval join's upper bound (Nexmark's default auctions last up to ~0.33 s)
SPARK_MASTER = "local[2]"
SPARK_DELAY_MS = 0


# -- the window join, both ways -----------------------------------------------------------------

def _records(n: int, prefix: str, seed: int) -> list[tuple[int, float, str]]:
    rng = random.Random(seed)
    times = sorted(rng.uniform(0, SPAN) for _ in range(n))
    return [(rng.randrange(KEYS), t, f"{prefix}{i}") for i, t in enumerate(times)]


def _per_window_join_class() -> Any:
    from epochal import KeyedCoProcessFunction

    class PerWindowJoin(KeyedCoProcessFunction):  # type: ignore[misc]
        """Flink's window join: each record into every window it belongs to; a window's pairs
        from its own buffers when the watermark passes its end. Written as a user would on this
        engine's keyed state: one dict per key, window end -> (start, lefts, rights), read for
        writing (copied once per key and checkpoint while a snapshot shares it)."""

        def __init__(self, size: float, slide: float) -> None:
            from epochal.windows import Sliding

            self.window = Sliding(size, slide)

        def open(self, ctx: Any) -> None:
            self.windows = ctx.value_state("windows")

        def _add(self, record: Any, side: int, ctx: Any) -> None:
            t, window = record[1], self.window
            windows = self.windows.value()
            if windows is None:
                windows = {}
                self.windows.update(windows)
            for k in range(window.first_end_index(t), window.last_start_index(t) + 1):
                end = window.end_of(k)
                buffers = windows.get(end)
                if buffers is None:
                    buffers = windows[end] = (window.start_of(k), [], [])
                    ctx.timers.register_event_time(end)
                buffers[1 + side].append(record)

        def process_element1(self, value: Any, ctx: Any) -> None:
            self._add(value, 0, ctx)

        def process_element2(self, value: Any, ctx: Any) -> None:
            self._add(value, 1, ctx)

        def on_timer(self, timestamp: float, ctx: Any) -> Iterable[Any]:
            windows = self.windows.value() or {}
            buffers = windows.pop(timestamp, None)
            if not windows:
                self.windows.clear()
            if buffers is None:
                return ()
            start, lefts, rights = buffers
            return [(start, left[2], right[2]) for left in lefts for right in rights]

    return PerWindowJoin


class _Pairs:
    """A ProcessJoinFunction emitting `(window start, left id, right id)`, as `PerWindowJoin` does."""

    def process_element(self, left: Any, right: Any, ctx: Any) -> Iterable[Any]:
        return ((ctx.window[0], left[2], right[2]),)


def _window_job(kind: str, left: list[Any], right: list[Any], slide: float, directory: str,
                sink: Any) -> Any:
    from epochal import CheckpointConfig, StateConfig, StreamEnvironment, WatermarkStrategy
    from epochal.testing import ListSource
    from epochal.windows import Sliding

    env = StreamEnvironment(parallelism=2, executor="inprocess", batch_size=1024,
                            state=StateConfig(incremental=False),
                            checkpoint=CheckpointConfig(interval=0.5, directory=directory))
    on_time = WatermarkStrategy.for_monotonous_timestamps(timestamp=1)
    a = env.from_source(ListSource(left, splits=2), watermarks=on_time)
    b = env.from_source(ListSource(right, splits=2), watermarks=on_time)
    if kind == "slices":
        joined = (a.join(b).where(lambda r: r[0]).equal_to(lambda r: r[0]).window(Sliding(SIZE, slide))
                  .process(_process_join(), name="join"))
    else:
        joined = a.key_by(lambda r: r[0]).connect(b.key_by(lambda r: r[0])).process(
            _per_window_join_class()(SIZE, slide), name="join")
    joined.sink_to(sink)
    return env


def _process_join() -> Any:
    from epochal import ProcessJoinFunction

    class Pairs(_Pairs, ProcessJoinFunction):  # type: ignore[misc]
        pass

    return Pairs()


def _count_sink() -> Any:
    from epochal.api.connector import Sink, SinkWriter

    class Writer(SinkWriter):  # type: ignore[misc]
        def __init__(self, counter: list[int]) -> None:
            self.counter = counter

        def write(self, batch: Any) -> None:
            self.counter[0] += batch.num_rows if hasattr(batch, "num_rows") else len(batch)

        def prepare_commit(self, checkpoint_id: int) -> None:
            return None

    class CountingSink(Sink):  # type: ignore[misc]
        def __init__(self) -> None:
            self.counter = [0]

        def create_writer(self, subtask: int, parallelism: int) -> SinkWriter:
            return Writer(self.counter)

        def commit(self, committables: list[Any]) -> None:
            pass

    return CountingSink()


def _run_window(kind: str, left: list[Any], right: list[Any], slide: float) -> dict[str, Any]:
    directory = tempfile.mkdtemp(prefix=f"bench-wjoin-{kind}-")
    try:
        sink = _count_sink()
        env = _window_job(kind, left, right, slide, directory, sink)
        started = time.perf_counter()
        result = env.execute(f"window-join-{kind}")
        seconds = time.perf_counter() - started
        sizes = [c.size for c in result.checkpoints]
        return {"seconds": seconds, "records_per_s": (len(left) + len(right)) / seconds, "pairs": sink.counter[0],
                "max_checkpoint_bytes": max(sizes, default=0), "checkpoints": len(sizes)}
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def _same_pairs(slide: float) -> bool:
    """Both ways emit the same pairs (a small run, collected)."""
    from epochal.testing import CollectSink

    left, right = _records(2_000, "l", 1), _records(1_000, "r", 2)
    out = []
    for kind in ("slices", "per_window"):
        directory = tempfile.mkdtemp(prefix="bench-wjoin-check-")
        try:
            sink = CollectSink()
            _window_job(kind, left, right, slide, directory, sink).execute(f"check-{kind}")
            out.append(Counter(tuple(r) for r in sink.committed()))
        finally:
            shutil.rmtree(directory, ignore_errors=True)
    return out[0] == out[1] and sum(out[0].values()) > 0


def window_part(quick: bool) -> list[dict[str, Any]]:
    n = 20_000 if quick else 120_000
    left, right = _records(n, "l", 3), _records(n // 4, "r", 4)
    rows = []
    for slide in SLIDES:
        row: dict[str, Any] = {"slide": slide, "windows_per_record": int(SIZE / slide),
                               "same_pairs": _same_pairs(slide)}
        for kind in ("slices", "per_window"):
            row[kind] = _run_window(kind, left, right, slide)
        rows.append(row)
    return rows


# -- the interval join against Spark SS -----------------------------------------------------------

def _auction_rows(batch: pa.RecordBatch) -> pa.RecordBatch:
    kept = batch.filter(pc.equal(batch.column("kind"), 1))
    return pa.RecordBatch.from_arrays([kept.column("a_id"), kept.column("dateTime")], names=["id", "dateTime"])


def _bid_rows(batch: pa.RecordBatch) -> pa.RecordBatch:
    kept = batch.filter(pc.equal(batch.column("kind"), 2))
    return pa.RecordBatch.from_arrays([kept.column("b_auction"), kept.column("b_price"), kept.column("dateTime")],
                                      names=["auction", "price", "dateTime"])


def _pair_count(auction: Any, bid: Any) -> int:
    return 1


def epochal_interval(directory: str, events: int) -> dict[str, Any]:
    from epochal import CheckpointConfig, StateConfig, StreamEnvironment, WatermarkStrategy
    from epochal.connectors import ParquetSource

    checkpoints = tempfile.mkdtemp(prefix="bench-ijoin-")
    try:
        sink = _count_sink()
        env = StreamEnvironment(parallelism=2, executor="inprocess", batch_size=8192,
                                state=StateConfig(incremental=False),
                                checkpoint=CheckpointConfig(interval=1.0, directory=checkpoints, retain=1_000))
        # one source subtask reads the files one after the other (in_order), as Spark SS's one
        # file per micro-batch does: files read at once (two subtasks, or one reading all its files
        # round robin) make the watermark the lowest of theirs, and it holds the later files'
        # records in the join's state (1.47 M rows at the peak checkpoint without in_order)
        events_stream = env.from_source(ParquetSource(directory, in_order=True), name="events",
                                        watermarks=WatermarkStrategy.for_monotonous_timestamps(timestamp="dateTime"))
        events_stream.set_parallelism(1)
        auctions = events_stream.map_batches(_auction_rows, name="auctions").key_by("id")
        bids = events_stream.map_batches(_bid_rows, name="bids").key_by("auction")
        auctions.interval_join(bids).between(0, BOUND_S).apply(_pair_count, name="join").uid("join").sink_to(sink)
        started = time.perf_counter()
        result = env.execute("interval-join")
        seconds = time.perf_counter() - started
        peak = max(result.checkpoints, key=lambda c: c.size, default=None)
        rows = _rows_held(checkpoints, peak.checkpoint_id) if peak is not None else 0
        return {"seconds": seconds, "events_per_s": events / seconds, "results": sink.counter[0],
                "max_checkpoint_bytes": 0 if peak is None else peak.size, "rows_held_at_peak": rows}
    finally:
        shutil.rmtree(checkpoints, ignore_errors=True)


def _rows_held(checkpoints: str, checkpoint_id: int) -> int:
    """How many records the join's state held in a checkpoint (both sides)."""
    from epochal.runtime.task.snapshots import read_keyed_chain
    from epochal.state.storage import CheckpointStorage

    storage = CheckpointStorage(checkpoints, create=False)
    operator = storage.resolve(str(checkpoint_id)).operator("join")
    if operator is None:
        return 0
    held = 0
    for subtask in operator.subtasks:
        for states in read_keyed_chain(storage, subtask.keyed_chain()).values():
            held += sum(len(v) for v in states.get("__interval_join__", {}).values())
    return held


def spark_interval(session: Any, directory: str, events: int, timeout: float = 900.0) -> dict[str, Any]:
    """Spark SS's stream-stream inner join of the same files, one file per micro-batch."""
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    session.conf.set("spark.sql.shuffle.partitions", "2")
    session.sparkContext.setLogLevel("ERROR")
    schema = T.StructType.fromJson(session.read.parquet(directory).schema.jsonValue())
    stream = (session.readStream.schema(schema).option("maxFilesPerTrigger", 1).parquet(directory))
    auctions = (stream.where(F.col("kind") == 1).select(F.col("a_id").alias("id"), F.col("dateTime").alias("a_time"))
                .withWatermark("a_time", f"{SPARK_DELAY_MS} milliseconds"))
    bids = (stream.where(F.col("kind") == 2).select("b_auction", "b_price", F.col("dateTime").alias("b_time"))
            .withWatermark("b_time", f"{SPARK_DELAY_MS} milliseconds"))
    upper = F.col("a_time") + F.expr(f"INTERVAL {int(BOUND_S * 1000)} MILLISECONDS")
    joined = auctions.join(bids, (F.col("id") == F.col("b_auction")) & (F.col("b_time") >= F.col("a_time"))
                           & (F.col("b_time") <= upper))
    checkpoint = tempfile.mkdtemp(prefix="spark-ijoin-chk-")
    try:
        started = time.perf_counter()
        query = (joined.writeStream.format("noop").outputMode("append").trigger(availableNow=True)
                 .option("checkpointLocation", checkpoint).start())
        finished = query.awaitTermination(timeout)
        seconds = time.perf_counter() - started
        if not finished:
            query.stop()
        progress = query.recentProgress
        states = [op for p in progress for op in p.get("stateOperators", [])]
        return {"finished": bool(finished), "seconds": seconds, "events_per_s": events / seconds if finished else None,
                "results": sum(int((p.get("sink") or {}).get("numOutputRows", 0) or 0) for p in progress),
                "batches": len(progress),
                "max_state_rows": max((int(s.get("numRowsTotal", 0)) for s in states), default=0),
                "max_state_bytes": max((int(s.get("memoryUsedBytes", 0)) for s in states), default=0)}
    finally:
        shutil.rmtree(checkpoint, ignore_errors=True)


def interval_part(quick: bool) -> dict[str, Any]:
    from .nexmark import write_events

    events = 200_000 if quick else 2_000_000
    directory = tempfile.mkdtemp(prefix="bench-ijoin-events-")
    try:
        write_events(directory, events)
        out: dict[str, Any] = {"events": events, "bound_s": BOUND_S}
        out["epochal"] = epochal_interval(directory, events)
        try:
            out["spark_ss"] = run_on_spark(SPARK_MASTER, "benchmarks.joins", "spark_interval", timeout=3600,
                                           directory=directory, events=events)
        except Exception as exc:  # noqa: BLE001 - reported in the result
            out["spark_ss"] = {"error": f"{type(exc).__name__}: {str(exc)[-600:]}"}
        return out
    finally:
        shutil.rmtree(directory, ignore_errors=True)


# -- the report -------------------------------------------------------------------------------------

@benchmark("joins", "Joins: window join on slices vs per window; interval join vs Spark SS")
def run(quick: bool) -> dict[str, Any]:
    result = {"window_join": window_part(quick), "interval_join": interval_part(quick),
              "window_records": f"{(20_000 if quick else 120_000) * 5 // 4:,}"}
    _plot(result)
    result["summary"] = _summary(result)
    return result


def _mb(n: float) -> str:
    return f"{n / 1e6:.1f} MB"


def _summary(result: dict[str, Any]) -> str:
    lines = [f"Window join of {result.get('window_records', 'n')} records (in process, 2 subtasks; records in per "
             "second, and the largest full checkpoint); the per-window join is a `KeyedCoProcessFunction` "
             "keeping each record in every window's buffer, as Flink's `JoinedStreams` does:", "",
             "| windows per record | slices: records/s | per window: records/s | slices: state | per window: state "
             "| same pairs |", "|---|---|---|---|---|---|"]
    for row in result["window_join"]:
        s, w = row["slices"], row["per_window"]
        lines.append(f"| {row['windows_per_record']} | {s['records_per_s']:,.0f} | {w['records_per_s']:,.0f} | "
                     f"{_mb(s['max_checkpoint_bytes'])} | {_mb(w['max_checkpoint_bytes'])} | {row['same_pairs']} |")
    if result.get("window_started"):  # the interval join rerun alone, the window join's figures kept
        lines += ["", f"(Window join run {result['window_started']}; interval join run {result['interval_started']}.)"]
    lines += ["", "![window join on slices and per window](img/joins_window.png)"]
    ij = result["interval_join"]
    e, sp = ij["epochal"], ij["spark_ss"]
    lines += ["", f"Interval join, Nexmark auctions and their bids within {ij['bound_s']} s, {ij['events']:,} events "
              "from the same Parquet files:", "",
              "| system | events/s | results | state at its largest |", "|---|---|---|---|",
              f"| Epochal (in process, the join at 2 subtasks) | {e['events_per_s']:,.0f} | {e['results']:,} | "
              f"{e['rows_held_at_peak']:,} rows, {_mb(e['max_checkpoint_bytes'])} checkpointed |"]
    if "error" in sp:
        lines.append(f"| Spark SS (local[2]) | failed: {sp['error'][:200]} | | |")
    else:
        rate = "stopped" if not sp.get("events_per_s") else f"{sp['events_per_s']:,.0f}"
        lines.append(f"| Spark SS (local[2]) | {rate} | {sp['results']:,} | {sp['max_state_rows']:,} rows, "
                     f"{_mb(sp['max_state_bytes'])} in memory |")
    lines += ["", "State: the records Epochal's join held at its largest full checkpoint (the watermark moves with "
              "every batch of the file being read); Spark's state store rows at their largest (its watermark moves "
              "between micro-batches, one 500,000-event file each, so it holds about a file's auctions and bids)."]
    if result.get("note"):
        lines += ["", result["note"]]
    return "\n".join(lines)


def _plot(result: dict[str, Any]) -> None:
    plt = pyplot()
    if plt is None:
        return
    rows = result["window_join"]
    x = [r["windows_per_record"] for r in rows]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 4))
    for kind, label in (("slices", "on shared slices"), ("per_window", "per window (Flink's way)")):
        ax1.plot(x, [r[kind]["records_per_s"] for r in rows], marker="o", label=label)
        ax2.plot(x, [r[kind]["max_checkpoint_bytes"] / 1e6 for r in rows], marker="o", label=label)
    ax1.set(xlabel="windows per record (10 s windows)", ylabel="records in per second", title="Throughput")
    ax2.set(xlabel="windows per record (10 s windows)", ylabel="largest full checkpoint (MB)", title="State")
    ax1.legend()
    ax2.legend()
    fig.tight_layout()
    save_figure(fig, "joins_window.png")


__all__ = ["epochal_interval", "run", "spark_interval"]
