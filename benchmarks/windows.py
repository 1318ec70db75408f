"""Sliding windows: shared slices (Cutty) against per-window buckets and Spark's `window()`.

One run, one data set: `records` events `(k, ts, v)` (1,000 keys drawn uniformly, `RATE` events a
second of event time, `ts` in float seconds since the epoch), written once as Parquet files, in
two arrival orders: in order, and with 20 % of the events delayed by up to `DELAY` seconds (the
watermark trails by `DELAY`, so no event is late). Workloads: (a) one 60 s window sliding by 60,
30, 10, 5, 1 and 0.5 s; (b) 1, 10 and 100 concurrent sliding queries on the stream (query i:
size 60 + i s, slide 30 + i % 30 s, so they overlap and cut event time at different edges).
Three systems, each reading the same files:

1. Epochal, shared slicing: `key_by("k").windows({...}).count()` on the columnar path (one slice
   table per subtask: a row per key, a column per slice, every due window of every key fired in
   one vectorized pass), in-process, parallelism 1, 1 s checkpoints to a temporary directory, a
   sink that discards (and counts). Best of `SLICING_REPS` runs: a run takes under a second, so
   one run is at the mercy of the shared machine.
2. Per-window buckets, what Flink's window assigners and Spark's `window()` do, as an Epochal job
   too (same source, executor, checkpoints and sink): a `KeyedProcessFunction` adds each record to
   every window holding it (a count per window in `MapState`) and fires each window on an
   event-time timer at its end. Slow by design, so where it would take long it reads a prefix of
   the files (`bucket_records`); Epochal then runs on that prefix too, and the speedup compares
   the two on the same records (the same windows fire at the same watermarks).
3. Spark Structured Streaming: `readStream.parquet` with the schema, `withWatermark`,
   `groupBy(window(...), "k").count()` (a union of such aggregations for several queries),
   written to the `noop` sink with `trigger(availableNow=True)`, one session (local[2]) started
   before any timing.

Before timing, Epochal and the buckets job must produce the same window counts on a sample.

One module of about 550 lines, past the usual 400, on purpose: the runner registers benchmarks by
module, and the Spark child process imports `spark_part` from it; data, the three systems and the
report read best side by side.
"""

from __future__ import annotations

import math
import os
import shutil
import tempfile
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from epochal import (
    CheckpointConfig,
    KeyedProcessFunction,
    ProcessContext,
    Sink,
    Source,
    SplitReader,
    StreamEnvironment,
    WatermarkStrategy,
)
from epochal.windows import Sliding

from .runner import benchmark, pyplot, save_figure
from .spark_subprocess import run_on_spark

KEYS = 1000
RATE = 10_000.0  # events a second of event time
DELAY = 5.0  # watermark delay; out-of-order events are delayed by less
OUT_OF_ORDER = 0.2
EPOCH = 1_700_000_000.0  # event time starts here (2023-11-14)
FILE_ROWS = 200_000  # rows per Parquet file
BATCH = 8192  # rows per source batch
SLIDES = (60.0, 30.0, 10.0, 5.0, 1.0, 0.5)
QUERY_COUNTS = (1, 10, 100)
SLICING_REPS = 5  # Epochal's runs per row (the best counts); buckets and Spark run once
BUCKET_BUDGET = 16_000_000  # ~ records × windows a record: what the buckets baseline may process
BUCKET_STEP = 10_000
SPARK_MASTER = "local[2]"
SPARK_ROW_TIMEOUT = 300.0  # seconds a Spark query may run before it is stopped (and reported so)
ORDERS = {"in order": 0.0, "20 % out of order": OUT_OF_ORDER}
FLAT = 0.8  # "flat": the slowest row within 20 % of the fastest
SCHEMA = pa.schema([("k", pa.string()), ("ts", pa.float64()), ("v", pa.int64())])


@dataclass(frozen=True, slots=True)
class Workload:
    """One row's window queries: `(size, slide)` pairs, named `q0`, `q1`, …"""

    name: str
    group: str  # "slide": part (a); "queries": part (b)
    x: float  # the slide (a) or the number of queries (b)
    windows: tuple[tuple[float, float], ...]

    def queries(self) -> dict[str, Sliding]:
        return {f"q{i}": Sliding(size, slide) for i, (size, slide) in enumerate(self.windows)}

    @property
    def windows_per_record(self) -> float:
        return sum(size / slide for size, slide in self.windows)


def workloads() -> list[Workload]:
    out = [Workload(f"60 s / {s:g} s", "slide", s, ((60.0, s),)) for s in SLIDES]
    for n in QUERY_COUNTS:
        out.append(Workload(f"{n} queries", "queries", n, tuple((60.0 + i, 30.0 + i % 30) for i in range(n))))
    return out


# -- data: written once, read by every system ------------------------------------------------------


def make_data(directory: str, records: int, disorder: float, keys: int = KEYS, rate: float = RATE,
              seed: int = 7) -> list[str]:
    """Parquet files of `records` events in arrival order; a share `disorder` delayed < DELAY s."""
    rng = np.random.default_rng(seed)
    ts = EPOCH + np.sort(rng.uniform(0.0, records / rate, records))
    key = rng.integers(0, keys, records)
    value = rng.integers(0, 100, records)
    arrival = ts.copy()
    delayed = rng.random(records) < disorder
    arrival[delayed] += rng.uniform(0.0, DELAY * 0.99, int(delayed.sum()))
    order = np.argsort(arrival, kind="stable")
    names = np.array([f"k{i:04d}" for i in range(keys)], dtype=object)
    table = pa.table([pa.array(names[key[order]], pa.string()), pa.array(ts[order]), pa.array(value[order])],
                     schema=SCHEMA)
    os.makedirs(directory, exist_ok=True)
    paths = []
    first = time.time() - 3600
    for i, start in enumerate(range(0, records, FILE_ROWS)):
        path = os.path.join(directory, f"part-{i:04d}.parquet")
        pq.write_table(table.slice(start, FILE_ROWS), path)
        os.utime(path, (first + i, first + i))  # Spark's file source takes files by modification time
        paths.append(path)
    return paths


@dataclass(frozen=True, slots=True)
class FilesSplit:
    split_id: str


class _FilesReader(SplitReader):
    """Reads the files in order, one at a time; the position is the number of rows handed out."""

    def __init__(self, paths: Sequence[str], limit: int, position: int | None) -> None:
        self.paths = paths
        self.limit = limit
        self.pos = position or 0
        self.file = -1
        self.file_start = 0
        self.rows: pa.RecordBatch | None = None

    def _load(self) -> bool:
        """Make `rows` the file holding row `pos`; False past the last file."""
        while self.rows is None or self.pos >= self.file_start + self.rows.num_rows:
            if self.rows is not None:
                self.file_start += self.rows.num_rows
            self.file += 1
            if self.file >= len(self.paths):
                return False
            self.rows = pq.read_table(self.paths[self.file]).combine_chunks().to_batches()[0]
        return True

    def read(self, max_records: int) -> pa.RecordBatch | None:
        if self.pos >= self.limit or not self._load():
            return None
        assert self.rows is not None
        offset = self.pos - self.file_start
        n = min(max_records, self.rows.num_rows - offset, self.limit - self.pos)
        self.pos += n
        return self.rows.slice(offset, n)

    def position(self) -> int:
        return self.pos


class ParquetFilesSource(Source):
    """The benchmark's files as one replayable split of Arrow batches, read in arrival order
    (one split keeps the order: a source reads its splits in turn, batch by batch)."""

    def __init__(self, paths: Sequence[str], limit: int | None = None) -> None:
        self.paths = list(paths)
        self.limit = limit if limit is not None else sum(pq.read_metadata(p).num_rows for p in self.paths)

    def splits(self) -> Sequence[FilesSplit]:
        return [FilesSplit("files")]

    def open_split(self, split: Any, position: Any | None) -> SplitReader:
        return _FilesReader(self.paths, self.limit, position)


# -- the baseline: per-window buckets, as an Epochal job ---------------------------------------------


class WindowBuckets(KeyedProcessFunction):
    """Flink's window assigner in a process function: each record goes into every window that
    holds it (a count per `(query, window index)` in `MapState`), and each window fires on an
    event-time timer at its end. Emits `(key, query, window_start, window_end, count)`."""

    def __init__(self, windows: Sequence[tuple[float, float]], ts_index: int = 1) -> None:
        self.windows = [(f"q{i}", size, slide) for i, (size, slide) in enumerate(windows)]
        self.ts_index = ts_index

    def open(self, ctx: ProcessContext) -> None:
        self.counts = ctx.map_state("counts")

    def process_element(self, value: Any, ctx: ProcessContext) -> None:
        ts = value[self.ts_index]
        counts, register = self.counts, ctx.timers.register_event_time
        watermark = ctx.current_watermark()
        for q, (_name, size, slide) in enumerate(self.windows):
            k = math.floor(ts / slide)
            while k * slide + size > ts:  # every window [k·slide, k·slide + size) holding ts
                end = k * slide + size
                if end > watermark:  # a window already fired would drop the record as late
                    bucket = (q, k)
                    n = counts.get(bucket)
                    if n is None:
                        register(end)
                    counts.put(bucket, 1 if n is None else n + 1)
                k -= 1
        return None

    def on_timer(self, timestamp: float, ctx: ProcessContext) -> Iterable[Any]:
        out = []
        counts = self.counts
        for q, (name, size, slide) in enumerate(self.windows):
            k = round((timestamp - size) / slide)
            if k * slide + size == timestamp:  # the timer's float, computed as it was registered
                n = counts.get((q, k))
                if n is not None:
                    counts.remove((q, k))
                    out.append((ctx.key, name, k * slide, timestamp, n))
        return out


# -- Epochal runs --------------------------------------------------------------------------------------


def epochal_env(source: Source, workload: Workload, system: str, sink: Sink, checkpoints: str | None) -> Any:
    """The job of `system` ("slicing" or "buckets") on `source`, into `sink`."""
    config = CheckpointConfig(interval=1.0, directory=checkpoints) if checkpoints else None
    env = StreamEnvironment(parallelism=1, executor="inprocess", checkpoint=config, batch_size=BATCH)
    strategy = WatermarkStrategy.bounded_out_of_orderness(DELAY, timestamp="ts")
    keyed = env.from_source(source, watermarks=strategy, name="events").key_by("k")
    results: Any
    if system == "slicing":
        results = keyed.windows(workload.queries()).count()
    else:
        results = keyed.process(WindowBuckets(workload.windows), name="buckets")
    results.sink_to(sink, name="results")
    return env


def run_epochal(paths: Sequence[str], workload: Workload, system: str, limit: int | None = None) -> dict[str, Any]:
    """One timed run (the whole `execute()`): records in, window results out, records/s."""
    from . import workloads as w

    checkpoints = tempfile.mkdtemp(prefix="epochal-windows-chk-")
    try:
        env = epochal_env(ParquetFilesSource(paths, limit), workload, system, w.NullSink(), checkpoints)
        started = time.perf_counter()
        result = env.execute(f"windows-{system}")
        seconds = time.perf_counter() - started
    finally:
        shutil.rmtree(checkpoints, ignore_errors=True)
    records = result.operator("events").records_out
    return {"records": records, "seconds": seconds, "records_per_s": records / seconds,
            "results": result.operator("results").records_in, "checkpoints": len(result.checkpoints)}


def bucket_records(workload: Workload, records: int) -> int:
    """How many records the buckets baseline reads: all if cheap, else a prefix worth about
    `BUCKET_BUDGET` window updates (in steps of `BUCKET_STEP` records)."""
    budget = int(BUCKET_BUDGET / workload.windows_per_record) // BUCKET_STEP * BUCKET_STEP
    return min(records, max(budget, BUCKET_STEP))


def window_counts(paths: Sequence[str], workload: Workload, system: str) -> list[tuple[Any, ...]]:
    """Every window result of `system` on `paths`, as sorted `(key, query, start, end, count)`."""
    from epochal.testing import CollectSink

    sink = CollectSink()
    epochal_env(ParquetFilesSource(paths), workload, system, sink, None).execute("sample")
    return sorted((k, q, round(s, 6), round(e, 6), int(n)) for k, q, s, e, n in sink.committed())


def check_agreement(directory: str, records: int = 20_000, keys: int = 20, rate: float = 100.0) -> dict[str, int]:
    """Epochal's windows equal the buckets baseline's on a sample (in order and out of order);
    returns the number of windows compared per case. A fast wrong answer cannot pass."""
    checked = {}
    cases = [Workload("60/5", "slide", 5.0, ((60.0, 5.0),)), Workload("0.5", "slide", 0.5, ((6.0, 0.5),)),
             Workload("10 queries", "queries", 10, tuple((6.0 + i, 3.0 + i % 3) for i in range(10)))]
    for disorder in (0.0, OUT_OF_ORDER):
        paths = make_data(os.path.join(directory, f"sample-{disorder}"), records, disorder, keys, rate, seed=3)
        for case in cases:
            slicing = window_counts(paths, case, "slicing")
            buckets = window_counts(paths, case, "buckets")
            if slicing != buckets:
                diff = sorted(set(slicing) ^ set(buckets))[:5]
                raise AssertionError(f"{case.name}, disorder {disorder}: slicing and buckets disagree, e.g. {diff}")
            checked[f"{case.name} @ {disorder:.0%} out of order"] = len(slicing)
    return checked


# -- Spark Structured Streaming ------------------------------------------------------------------------


def spark_part(session: Any, directories: dict[str, str], rows: list[list[Any]], max_files: int,
               row_timeout: float) -> dict[str, Any]:
    """The Spark side, run in a child process by `run_on_spark`: one timed streaming query per
    `[order, workload name, [[size, slide], ...], records]`; the session's start-up is excluded,
    each query's own start (planning, its first micro-batch) is included, as Epochal's is."""
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    session.conf.set("spark.sql.shuffle.partitions", "2")
    session.sparkContext.setLogLevel("ERROR")
    schema = T.StructType([T.StructField("k", T.StringType()), T.StructField("ts", T.DoubleType()),
                           T.StructField("v", T.LongType())])
    out: dict[str, Any] = {}
    for order, name, windows, records in rows:
        checkpoint = tempfile.mkdtemp(prefix="spark-windows-chk-")
        try:
            events = (session.readStream.schema(schema).option("maxFilesPerTrigger", max_files)
                      .parquet(directories[order])
                      .withColumn("t", F.timestamp_seconds("ts"))
                      .withWatermark("t", f"{DELAY:g} seconds"))
            counts = None
            for size, slide in windows:
                window = F.window("t", f"{size * 1000:.0f} milliseconds", f"{slide * 1000:.0f} milliseconds")
                one = events.groupBy(window, "k").count()
                counts = one if counts is None else counts.unionByName(one)
            assert counts is not None
            started = time.perf_counter()
            query = (counts.writeStream.format("noop").outputMode("append").trigger(availableNow=True)
                     .option("checkpointLocation", checkpoint).start())
            finished = query.awaitTermination(row_timeout)
            seconds = time.perf_counter() - started
            if not finished:
                query.stop()
            progress = query.recentProgress
            read = sum(int(p["numInputRows"]) for p in progress)
            out[f"{order}|{name}"] = {
                "records": records, "seconds": seconds, "finished": bool(finished),
                "records_per_s": records / seconds if finished else None,
                "batches": len(progress), "input_rows": read,
            }
        finally:
            shutil.rmtree(checkpoint, ignore_errors=True)
    return out


# -- the benchmark -------------------------------------------------------------------------------------


def measure_epochal(paths: dict[str, list[str]], records: int, chosen: Sequence[Workload],
                    reps: int = 1) -> list[dict[str, Any]]:
    """The Epochal rows: slicing on every record, buckets (on a prefix if slow), and slicing on
    the buckets' prefix where it read one."""
    rows = []
    for workload in chosen:
        for order in ORDERS:
            row: dict[str, Any] = {"workload": workload.name, "group": workload.group, "x": workload.x,
                                   "order": order, "queries": len(workload.windows),
                                   "windows": [list(w) for w in workload.windows],
                                   "windows_per_record": round(workload.windows_per_record, 1)}
            prefix = bucket_records(workload, records)
            runs = {"slicing": (records, "slicing"), "buckets": (prefix, "buckets")}
            if prefix < records:
                runs["slicing_prefix"] = (prefix, "slicing")
            for label, (limit, system) in runs.items():
                timed = [run_epochal(paths[order], workload, system, limit)
                         for _ in range(reps if system == "slicing" else 1)]
                best = max(timed, key=lambda r: float(r["records_per_s"]))
                row[label] = {**best, "runs_records_per_s": [r["records_per_s"] for r in timed]}
            rows.append(row)
    return rows


def measure(records: int, directory: str, reps: int = 1, spark: bool = True,
            chosen: Sequence[Workload] | None = None, sample: int = 20_000) -> dict[str, Any]:
    """Every row on one data set written once: Epochal, buckets and (if `spark`) Spark SS."""
    paths = {o: make_data(os.path.join(directory, o.replace(" ", "_").replace("%", "pc")), records, d)
             for o, d in ORDERS.items()}
    agreement = check_agreement(os.path.join(directory, "sample"), sample)
    rows = measure_epochal(paths, records, chosen or workloads(), reps)
    result: dict[str, Any] = {
        "records": records, "files": len(paths["in order"]), "keys": KEYS, "rate": RATE, "delay": DELAY,
        "batch": BATCH, "reps": reps, "sample": sample, "agreement": agreement, "rows": rows,
        "spark_master": SPARK_MASTER, "spark_row_timeout": SPARK_ROW_TIMEOUT,
    }
    if spark:
        spark_rows = [[r["order"], r["workload"], r["windows"], records] for r in rows]
        dirs = {o: os.path.dirname(p[0]) for o, p in paths.items()}
        try:
            found = run_on_spark(SPARK_MASTER, "benchmarks.windows", "spark_part", timeout=3600,
                                 directories=dirs, rows=spark_rows, max_files=1, row_timeout=SPARK_ROW_TIMEOUT)
        except (RuntimeError, OSError) as exc:  # keep the Epochal rows; the report says Spark failed
            result["spark_error"] = str(exc)[-2000:]
            found = {}
        for row in rows:
            if f"{row['order']}|{row['workload']}" in found:
                row["spark"] = found[f"{row['order']}|{row['workload']}"]
    return result


@benchmark("windows", "Sliding windows: shared slices against per-window buckets and Spark's window()")
def run(quick: bool) -> dict[str, Any]:
    records = 200_000 if quick else 2_000_000
    directory = tempfile.mkdtemp(prefix="epochal-windows-")
    try:
        result = measure(records, directory, reps=1 if quick else SLICING_REPS)
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    _plot(result)
    result["summary"] = _summary(result)
    return result


# -- report --------------------------------------------------------------------------------------------


def _rate(row: dict[str, Any], system: str) -> float | None:
    found = row.get(system, {}).get("records_per_s")
    return None if found is None else float(found)


def _k(rate: float | None) -> str:
    return "—" if rate is None else f"{rate / 1e3:,.0f}"


def verdicts(result: dict[str, Any]) -> list[str]:
    """The issue's three targets, each with the numbers it was judged on."""
    rows = result["rows"]
    out = []
    for order in ORDERS:
        part = [r for r in rows if r["order"] == order]
        spreads = []
        for group, what in (("slide", "the slides"), ("queries", "the numbers of queries")):
            rates = [_rate(r, "slicing") or 0.0 for r in part if r["group"] == group]
            if len(rates) > 1:
                spreads.append((what, min(rates) / max(rates)))
        if spreads:
            met = all(spread >= FLAT for _, spread in spreads)
            shown = " and ".join(f"{spread:.0%} over {what}" for what, spread in spreads)
            out.append(f"**Throughput flat in the number of overlapping windows** ({order}): the slowest "
                       f"row runs at {shown} of the fastest: {'met' if met else 'not met'} "
                       f"(flat taken as within {1 - FLAT:.0%}).")
        hundred = [r for r in part if r["group"] == "queries" and r["x"] == max(QUERY_COUNTS)]
        finest = [r for r in part if r["group"] == "slide" and r["x"] == min(SLIDES)]
        if hundred:
            ratio = speedup(hundred[0])
            also = (f"; {speedup(finest[0]):.1f}× with one 60 s window sliding by {min(SLIDES):g} s "
                    f"({60 / min(SLIDES):.0f} overlapping windows)") if finest else ""
            out.append(f"**≥ 10× per-window buckets at {max(QUERY_COUNTS)} concurrent windows** ({order}): "
                       f"{ratio:.1f}× with {max(QUERY_COUNTS)} queries: {'met' if ratio >= 10 else 'not met'}"
                       f"{also}.")
    on_spark = [r for r in rows if "spark" in r]
    behind = [f"{r['workload']} ({r['order']})" for r in on_spark
              if (_rate(r, "slicing") or 0.0) <= (_rate(r, "spark") or 0.0)]
    missing = [f"{r['workload']} ({r['order']})" for r in rows if "spark" not in r]
    if on_spark:
        verdict = "not met" if behind else "not shown: rows missing" if missing else "met"
        out.append(f"**Ahead of Spark Structured Streaming on every row**: ahead on {len(on_spark) - len(behind)} "
                   f"of {len(on_spark)} rows measured on Spark"
                   + (f"; behind on {', '.join(behind)}" if behind else "")
                   + (f"; not measured on Spark: {', '.join(missing)}" if missing else "") + f": {verdict}.")
    return out


def speedup(row: dict[str, Any]) -> float:
    """Epochal ÷ buckets on the same records (the buckets' prefix, if it read one)."""
    mine = row.get("slicing_prefix", row["slicing"])
    return float(mine["records_per_s"]) / float(row["buckets"]["records_per_s"])


def _spark_cell(row: dict[str, Any]) -> tuple[str, str]:
    """The Spark column and the Epochal ÷ Spark column of a row."""
    spark = row.get("spark")
    if spark is None:
        return "not run", "—"
    if not spark["finished"]:
        return f"stopped after {spark['seconds']:.0f} s", "—"
    return _k(spark["records_per_s"]), f"{(_rate(row, 'slicing') or 0.0) / spark['records_per_s']:.1f}×"


def _summary(result: dict[str, Any]) -> str:
    lines = [
        f"{result['records']:,} events (`k`: {result['keys']:,} keys drawn uniformly; `ts`: float seconds, "
        f"{result['rate']:,.0f} events a second of event time; `v`: int), written once as {result['files']} "
        f"Parquet files in two arrival orders: in order, and with 20 % of the events delayed by up to "
        f"{result['delay']:g} s (the watermark delay, so none is late). Every system reads those files. "
        "Throughput is input records per second of the whole run, its start included (Spark's session "
        "start-up excluded), " + ("one run each." if result["reps"] == 1 else
                                  f"Epochal best of {result['reps']} runs, the others one run each."),
        "",
        "- **Epochal**: `key_by(\"k\").windows({...}).count()` on the columnar path, in-process, "
        f"parallelism 1 (one core), Arrow batches of {result['batch']:,} rows from a replayable source over "
        "the files, checkpoints every 1 s, a sink that discards. The window operator keeps one slice table "
        "(a row per key, a column per slice, numpy partials) and fires every due window of every key in one "
        "vectorized pass at each watermark.",
        "- **Buckets**: the same job with a `KeyedProcessFunction` in place of the window operator: it "
        "adds each record to every window holding it (a count per window in `MapState`) and fires each "
        "window on an event-time timer at its end, as Flink's window assigners and Spark's `window()` do. "
        "Where it would take long it reads a prefix of the files; Epochal is timed on the same prefix "
        "too, and *Epochal ÷ buckets* compares the two on the same records.",
        f"- **Spark**: Structured Streaming, `{result['spark_master']}` (two cores), 2 shuffle partitions: "
        "`readStream.schema(...).parquet(dir)`, `withWatermark`, `groupBy(window(...), \"k\").count()` "
        "(for several queries the union of one aggregation each), `noop` sink, `trigger(availableNow=True)`, "
        f"one file per micro-batch; a query still running after {result['spark_row_timeout']:.0f} s is stopped.",
        "- Query i of the concurrent rows is `Sliding(60 + i, 30 + i % 30)`: the queries overlap and "
        "cut event time at different edges.",
        "",
        "| workload | windows a record | order | Epochal k rec/s | results a record | buckets k rec/s "
        "(records) | Epochal on those records | Epochal ÷ buckets | Spark k rec/s | Epochal ÷ Spark |",
        "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in result["rows"]:
        mine = r.get("slicing_prefix", r["slicing"])
        spark, versus = _spark_cell(r)
        lines.append(
            f"| {r['workload']} | {r['windows_per_record']:g} | {r['order']} | {_k(_rate(r, 'slicing'))} | "
            f"{r['slicing']['results'] / r['slicing']['records']:.2f} | {_k(_rate(r, 'buckets'))} "
            f"({r['buckets']['records']:,}) | {_k(float(mine['records_per_s']))} | {speedup(r):.1f}× | "
            f"{spark} | {versus} |"
        )
    checked = "; ".join(f"{k}: {v:,}" for k, v in result["agreement"].items())
    lines += ["", f"Checked before timing (an assertion): Epochal and the buckets job produce the same "
              f"window counts on a {result['sample']:,}-event sample of 20 keys (windows compared: {checked}).",
              "", "Targets (issue 16):", ""]
    lines += [f"- {v}" for v in verdicts(result)]
    if "spark_error" in result:
        lines += ["", "Spark failed: `" + result["spark_error"].strip().splitlines()[-1] + "`"]
    lines += ["", "![throughput against the slide](img/windows_slide.png)",
              "![throughput against concurrent queries](img/windows_queries.png)", ""]
    return "\n".join(lines)


def _plot(result: dict[str, Any]) -> None:
    plt = pyplot()
    if plt is None:
        return
    styles = {"slicing": ("Epochal, shared slices", "#4C72B0"), "buckets": ("per-window buckets", "#DD8452"),
              "spark": ("Spark SS window()", "#55A868")}
    for group, xlabel, name in (("slide", "slide of a 60 s window (s)", "windows_slide.png"),
                                ("queries", "concurrent sliding queries", "windows_queries.png")):
        fig, ax = plt.subplots(figsize=(7.5, 4.5))
        for order, dash in (("in order", "-"), ("20 % out of order", "--")):
            part = sorted((r for r in result["rows"] if r["group"] == group and r["order"] == order),
                          key=lambda r: r["x"])
            for system, (label, color) in styles.items():
                points = [(r["x"], rate / 1e3) for r in part if (rate := _rate(r, system)) is not None]
                if points:
                    ax.plot([p[0] for p in points], [p[1] for p in points], dash, marker="o", color=color,
                            label=f"{label}, {order}")
        if not ax.lines:
            plt.close(fig)
            continue
        ax.set_xscale("log")
        ax.set_yscale("log")
        if group == "slide":
            ax.invert_xaxis()
        ax.set_xlabel(xlabel)
        ax.set_ylabel("thousand input records/s")
        ax.legend(fontsize=7)
        ax.grid(True, which="both", alpha=0.3)
        ax.set_title("One 60 s sliding window" if group == "slide" else "Concurrent sliding queries, one stream")
        fig.tight_layout()
        save_figure(fig, name)
