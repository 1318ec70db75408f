"""Nexmark: events/s per core of every query, Epochal beside Spark SS and Flink 1.13's published figures.

One run, one event stream: the examples' `NexmarkSource` (examples/nexmark/harness.py: N events,
seed SEED, Beam's defaults, event time at 10,000 events a second of event time, in order) with the
harness's watermarks on `dateTime` (no delay in order). Every query present in `examples/nexmark/`
(`qN.py`, loaded by file path: `NAME`, `DESCRIPTION`, `query(events) -> DataStream`) runs on:

1. Epochal in-process, parallelism 1 (one core), 1 s checkpoints to a temporary directory, a sink
   that discards: events/s of the whole `execute()`.
2. Epochal on local Spark (`local[2]`, parallelism 2, one split per worker), same checkpoints and
   sink: events/s from every worker running to the job finished, divided by 2 for per core; the
   stage's start-up (execute() called to every worker running) is measured and shown apart.
3. Spark Structured Streaming, `local[2]`, 2 shuffle partitions: the same events (generated once
   by the source's generator, flattened to top-level columns, written as Parquet files) read with
   `readStream.schema(...).parquet(dir)`, the query in DataFrame form after the Nexmark project's
   Flink SQL (nexmark-flink/src/main/resources/queries/qN.sql), `noop` sink,
   `trigger(availableNow=True)`, one file per micro-batch; each query in a session (a JVM) of its
   own, whose start-up is excluded. A query Spark SS cannot run says so, with the reason (`SPARK_SS`).
4. Flink 1.13's per-core figures published by the Nexmark project (`FLINK_13`): a fixed column.

Where Epochal falls short of a target on a query, an in-process run under cProfile says where the
time goes (shares by area of the code, and the top functions by cumulative time).

About 780 lines, past the usual 400, on purpose: the runner registers benchmarks by module and the
Spark child processes import `epochal_spark_part` and `spark_ss_part` from it; the three systems'
runs and the report read best side by side, as in `benchmarks/windows.py`.
"""

from __future__ import annotations

import cProfile
import importlib.util
import os
import pstats
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

from .runner import ROOT, benchmark, pyplot, save_figure, timed_execute
from .spark_subprocess import run_on_spark

QUERIES_DIR = os.path.join(ROOT, "examples", "nexmark")
SEED = 0
SOURCE = "nexmark"  # the source operator's name (the harness's)
CHECKPOINT_INTERVAL = 1.0
BATCH = 8192  # events per source batch
SPARK_MASTER = "local[2]"
SPARK_WORKERS = 2
SPARK_DRIVER_MEMORY = "4g"  # the local JVM's heap (Spark's default: 1 GB), for both Spark parts
FILE_EVENTS = 500_000  # events per Parquet file = per Spark SS micro-batch (one file a trigger)
SPARK_QUERY_TIMEOUT = 600.0  # seconds a Spark SS query may run before it is stopped (and reported so)
PROFILE_EVENTS = 300_000
WARMUP_EVENTS = 50_000  # an untimed in-process run of each query first  # events of the profiled in-process run
SPARK_SS_TARGET = 5.0  # the target: at least 5x Spark SS per core

# Flink 1.13, events/s per core: the Nexmark project's published result table (GUIDE_V1.md,
# "Benchmark Results"): 100 M events per query, 3 workers of 8 cores, parallelism 8, RocksDB with
# incremental checkpoints every 3 minutes, mini-batches of 2 s; cores = measured CPU use.
FLINK_13 = {"q0": 155_020, "q1": 157_940, "q2": 175_210, "q3": 152_120, "q4": 34_330, "q5": 22_140,
            "q7": 12_330, "q8": 146_140, "q11": 39_700, "q12": 75_670}
FLINK_SETUP = ("3 machines of 8 cores and 32 GB, 8 TaskManagers of one slot, parallelism 8, Java; the "
               "generator in the job (10 M events/s, so 100 M events span 10 s of event time); RocksDB "
               "with incremental checkpoints every 3 minutes; mini-batches of 2 s / 50,000 rows; "
               "cores = the CPU use measured on the workers (8.2 to 21 cores)")


# -- the queries ------------------------------------------------------------------------------------


def query_files(directory: str | None = None) -> list[tuple[str, str]]:
    """`(name, path)` of every `qN.py` in `directory` (QUERIES_DIR), by N."""
    directory = directory or QUERIES_DIR
    found = [(int(m.group(1)), f) for f in os.listdir(directory) if (m := re.fullmatch(r"q(\d+)\.py", f))]
    return [(f"q{n}", os.path.join(directory, f)) for n, f in sorted(found)]


def harness(directory: str | None = None) -> ModuleType:
    """examples/nexmark/harness.py (the examples' source, watermarks and loader), loaded by path
    (from examples/nexmark/sql/, the harness of the folder above)."""
    path = os.path.join(directory or QUERIES_DIR, "harness.py")
    if not os.path.exists(path):
        path = os.path.join(os.path.dirname(os.path.abspath(directory or QUERIES_DIR)), "harness.py")
    name = "nexmark_harness_" + str(abs(hash(os.path.abspath(path))))
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, path)
        assert spec is not None and spec.loader is not None, path
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module  # the harness pickles itself by value, by its module's name
        spec.loader.exec_module(module)
    return sys.modules[name]


def load_query(path: str) -> ModuleType:
    """A query module loaded by file path with the harness's `load` (pickled by value for Spark's
    workers), its folder importable in case it imports the harness."""
    folder = os.path.dirname(os.path.abspath(path))
    if folder not in sys.path:
        sys.path.insert(0, folder)
    module: ModuleType = harness(folder).load(path)
    for field in ("NAME", "DESCRIPTION", "query"):
        if not hasattr(module, field):
            raise AttributeError(f"{path} lacks {field} (every qN.py exposes NAME, DESCRIPTION and query)")
    return module


def load_queries(directory: str | None = None, only: Sequence[str] | None = None) -> dict[str, ModuleType]:
    return {name: load_query(path) for name, path in query_files(directory) if only is None or name in only}


# -- Epochal ----------------------------------------------------------------------------------------


def epochal_env(module: ModuleType, events: int, parallelism: int, checkpoints: str, session: Any = None,
                files: str | None = None) -> Any:
    """The query's job over N generated events: the examples' source and watermarks (the harness:
    one split per source subtask, watermarks on `dateTime`), 1 s checkpoints, a discarding sink.
    With `files`, the events are read from the Parquet files Spark SS reads (`write_events`)."""
    from epochal import CheckpointConfig, StreamEnvironment

    from . import workloads as w

    env = StreamEnvironment(parallelism=parallelism, executor="spark" if session else "inprocess", spark=session,
                            batch_size=BATCH,
                            checkpoint=CheckpointConfig(interval=CHECKPOINT_INTERVAL, directory=checkpoints))
    examples = harness(os.path.dirname(os.path.abspath(module.__file__ or QUERIES_DIR)))
    if files is not None:
        stream = examples.file_stream(env, files, getattr(module, "READS", None))  # as Spark, what it uses
    else:
        stream = examples.event_stream(env, examples.source(events, splits=parallelism, seed=SEED))
    module.query(stream).sink_to(w.NullSink(), name="results")
    return env


def watermark_delay(directory: str | None = None) -> float:
    """The harness's watermark delay for the benchmark's source (Spark SS's is the same)."""
    examples = harness(directory)
    return float(examples.watermarks(examples.source(1, splits=1, seed=SEED)).spec.max_delay)


def run_epochal(module: ModuleType, events: int, parallelism: int = 1, session: Any = None,
                files: str | None = None) -> dict[str, Any]:
    """One timed run; in-process the whole execute(), on Spark from every worker running to the end."""
    checkpoints = tempfile.mkdtemp(prefix="epochal-nexmark-chk-")
    try:
        job = epochal_env(module, events, parallelism, checkpoints, session, files).job_graph(
            f"nexmark-{module.NAME}")
        startup = None
        cpu = cpu_seconds()
        if session is None:
            result, seconds = timed_execute(job)
        else:
            from epochal.cluster.spark import SparkExecutor

            executor = SparkExecutor(session)
            called = time.monotonic()
            result = executor.execute(job)
            marks = dict(executor.timeline)
            seconds, startup = marks["finished"] - marks["running"], marks["running"] - called
        cpu = _used(cpu, cpu_seconds())
    finally:
        shutil.rmtree(checkpoints, ignore_errors=True)
    read = result.operator(SOURCE).records_out
    rate = read / seconds
    return {"events": read, "seconds": seconds, "events_per_s": rate, "events_per_s_per_core": rate / parallelism,
            "workers": parallelism, "results": result.operator("results").records_in,
            "checkpoints": len(result.checkpoints), "startup_s": startup, "cpu_s": cpu,
            "events_per_cpu_s": None if not cpu else read / cpu}


def cpu_seconds(root: int | None = None) -> float | None:
    """CPU seconds (user + system, every thread) used so far by process `root` (this one) and its
    live descendants, with the children they reaped: Nexmark's way of counting cores is the CPU
    the system used. Read from /proc; None where there is none."""
    root = os.getpid() if root is None else root
    parents: dict[int, int] = {}
    times: dict[int, float] = {}
    tick = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    try:
        names = os.listdir("/proc")
    except OSError:
        return None
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:  # gone meanwhile
            continue
        # after the command: state ppid ... utime(12) stime(13) cutime(14) cstime(15), 0-based from state
        parents[int(name)] = int(fields[1])
        times[int(name)] = sum(int(x) for x in fields[11:15]) / tick
    if root not in times:
        return None
    tree, frontier = {root}, [root]
    while frontier:
        parent = frontier.pop()
        children = [pid for pid, ppid in parents.items() if ppid == parent and pid not in tree]
        tree.update(children)
        frontier += children
    return sum(times[pid] for pid in tree)


def _used(before: float | None, after: float | None) -> float | None:
    return None if before is None or after is None else round(after - before, 3)


def profile_epochal(module: ModuleType, events: int, top: int = 12, files: str | None = None) -> dict[str, Any]:
    """Where an in-process run's time goes: shares by area, and the top functions by cumulative time."""
    profiler = cProfile.Profile()
    checkpoints = tempfile.mkdtemp(prefix="epochal-nexmark-prof-")
    try:
        env = epochal_env(module, events, 1, checkpoints, files=files)
        profiler.enable()
        env.execute(f"nexmark-{module.NAME}-profile")
        profiler.disable()
    finally:
        shutil.rmtree(checkpoints, ignore_errors=True)
    stats: Any = pstats.Stats(profiler)
    stats = stats.stats  # {(file, line, fn): (cc, nc, tottime, cumtime, callers)}
    total = sum(row[2] for row in stats.values()) or 1.0
    areas: dict[str, float] = {}
    for (path, _line, fn), row in stats.items():
        area = _area(path, fn)
        areas[area] = areas.get(area, 0.0) + row[2]
    ranked = sorted(stats.items(), key=lambda item: -item[1][3])
    functions = [{"function": _where(path, line, fn), "calls": row[1], "own_s": round(row[2], 3),
                  "cumulative_s": round(row[3], 3), "cumulative_share": round(row[3] / total, 3)}
                 for (path, line, fn), row in ranked if row[3] < 0.95 * total and not _wrapper(path, fn)][:top]
    return {"events": events, "profiled_s": round(total, 3), "functions": functions,
            "areas": {a: round(s / total, 3) for a, s in sorted(areas.items(), key=lambda x: -x[1])}}


# Where a profiled function's time counts: the first area whose test (of the function's file path,
# or of a built-in's name) matches.
_AREAS: tuple[tuple[str, Callable[[str, str], bool]], ...] = (
    ("the query (examples/nexmark)", lambda p, f: "examples/nexmark" in p),
    ("generator (connectors/nexmark)", lambda p, f: "connectors/nexmark" in p),
    ("windows (runtime/windowing)", lambda p, f: "runtime/windowing" in p or "operators/windows" in p),
    ("keyed state (state/)", lambda p, f: "epochal/state/" in p),
    ("checkpoints (snapshots, checkpointer)", lambda p, f: any(
        s in p for s in ("checkpointer", "snapshots", "coordinator", "aligner"))),
    ("operators and keying (runtime/operators, keys)", lambda p, f: any(
        s in p for s in ("runtime/operators", "key_index", "keys.py", "column_hash", "partition"))),
    ("tasks, channels, scheduler (runtime/, cluster/)", lambda p, f: "epochal/" in p),
    ("pyarrow and numpy (C calls)", lambda p, f: p == "~" and any(
        s in f for s in ("pyarrow", "numpy", "Array", "RecordBatch", "Table"))),
    ("pyarrow and numpy (Python side)", lambda p, f: "pyarrow" in p or "numpy" in p),
    ("pickling, I/O", lambda p, f: "pickle" in p or "pickle" in f or "posix" in f or "io." in f),
)


def _area(path: str, fn: str) -> str:
    for area, test in _AREAS:
        if test(path, fn):
            return area
    return "Python (builtins, other)"


def _where(path: str, line: int, fn: str) -> str:
    if path == "~":
        return fn
    short = path.split("/src/", 1)[-1] if "/src/" in path else path.split("/site-packages/", 1)[-1]
    return f"{short.replace(ROOT + os.sep, '')}:{line} {fn}"


def _wrapper(path: str, fn: str) -> bool:
    """Frames that hold the whole run (the executor's loop, a task's step, the profiler) and say
    nothing of where it goes (with those over 95 % of the run)."""
    return fn in ("<built-in method builtins.exec>", "<method 'disable' of '_lsprof.Profiler' objects>") or (
        any(s in path for s in ("cluster/inprocess", "api/environment", "runtime/job_master", "runtime/task/task.py")))


# -- Spark Structured Streaming ---------------------------------------------------------------------


def write_events(directory: str, events: int) -> list[str]:
    """The source's events, generated once, as flattened Parquet files of FILE_EVENTS in event
    order (the harness's `write_files`): what Spark SS reads, and Epochal too (`file_stream`)."""
    return harness().write_files(directory, events, seed=SEED, file_events=FILE_EVENTS)


# Queries Spark SS cannot run, and why (each was also tried: the report quotes Spark's error).
SPARK_SS: dict[str, str] = {
    "q4": "a stream-stream join feeding an aggregation (the maximum bid per auction) that feeds another "
          "(the average per category), with no event-time window on either: append mode needs windows on "
          "both, and in update mode Spark has no retractions, so the average would count every new maximum "
          "of an auction, not its final one; Spark refuses it by default (its correctness check, quoted)",
    "q12": "processing-time windows: Spark SS has no processing-time attribute per record; "
           "current_timestamp() is fixed per micro-batch, so a window on it groups micro-batches, "
           "not records by their arrival",
}


# Where a query falls short: what the profile shows and what would close the gap (read beside it).
_GENERATED = ("the query's own code is a few per cent of the time; about half is the generator "
              "(connectors/nexmark, and much of the Arrow time is its too). Epochal generates its events in the "
              "job, as the Nexmark project's Flink runs do, while Spark SS reads them from Parquet files written "
              "before its clock starts: the comparison as run charges Epochal alone for making its input. A "
              "faster generator (its string columns: names, the extra padding), or Epochal reading the same "
              "Parquet files, would likely close it.")
CLOSE_THE_GAP = {
    "q0": _GENERATED, "q1": _GENERATED, "q2": _GENERATED,
    "q3": "a third of the time is the generator, as for q0-q2 (Spark SS reads its input pre-generated). "
          "The rest is the join: the selection is columnar and keeps about one event in 80, but the join is a "
          "KeyedProcessFunction called once per kept record, with keyed state read and written per record, "
          "and an event-time timer for each auction that comes before its seller. A columnar keyed join (a batch's "
          "auctions matched against the stored persons with one vectorized lookup, state touched once per "
          "key and batch) would take the per-record Python calls out; Spark SS's stream-stream join is a "
          "hash join on state stores per micro-batch, in generated code.",
    "q5": "firing dominates: at each watermark the window operator pops one timer per auction with a "
          "window due, reads that auction's store, computes its count and emits one record, so the "
          "Python-level work is per (auction, window), and each bid is in 5 windows of 10 s sliding by 2 s. "
          "Firing every key due at a watermark in one columnar step (one operator-wide timer per slice edge "
          "instead of one per key; all keys' counts from their (key, slice) partials with vectorized prefix "
          "sums; one Arrow batch out) would leave per-key Python work only to late records. Spark SS does "
          "this step as one hash aggregation per micro-batch, in generated code.",
    "q11": "the sessions are in one columnar table (runs cut and merged per batch in numpy, every ended "
           "session fired at once per watermark); what is left is per batch: the key codes of the batch's "
           "bidders (a dictionary lookup per distinct bidder) and the sorts of the union. Shipping fewer, larger "
           "batches to the window operator, or sessionizing before the exchange (a local phase, as for periodic "
           "windows), would be next. Spark SS's session_window is a sort and a merge per micro-batch in "
           "generated code.",
}


def spark_query(name: str, events: Any) -> tuple[Any, str] | None:
    """Query `name` as a Spark DataFrame over the flattened events (with the watermark), and its
    output mode; None if it has no Spark form here. Follows the Nexmark project's Flink SQL."""
    from pyspark.sql import functions as F

    def kind(k: int, prefix: str) -> Any:
        cols = [F.col(c).alias(c[2:]) for c in events.columns if c.startswith(prefix)]
        return events.where(F.col("kind") == k).select(*cols, "dateTime")

    bid, auction, person = kind(2, "b_"), kind(1, "a_"), kind(0, "p_")
    if name == "q0":
        return bid.select("auction", "bidder", "price", "dateTime", "extra"), "append"
    if name == "q1":
        return bid.select("auction", "bidder", (F.col("price") * 0.908).alias("price"), "dateTime", "extra"), "append"
    if name == "q2":
        return bid.where(F.col("auction") % 123 == 0).select("auction", "price"), "append"
    if name == "q3":
        a = auction.where(F.col("category") == 10).select(F.col("id").alias("a_id"), "seller")
        p = person.where(F.col("state").isin("OR", "ID", "CA")).select(
            F.col("id").alias("p_id"), "name", "city", "state")
        return a.join(p, F.col("seller") == F.col("p_id")).select("name", "city", "state", "a_id"), "append"
    if name == "q4":
        a = auction.select(F.col("id").alias("a_id"), "category", F.col("dateTime").alias("a_time"), "expires")
        b = bid.select("auction", "price", F.col("dateTime").alias("b_time"))
        joined = a.join(b, (F.col("a_id") == F.col("auction")) & F.col("b_time").between(F.col("a_time"),
                                                                                           F.col("expires")))
        final = joined.groupBy("a_id", "category").agg(F.max("price").alias("final"))
        return final.groupBy("category").agg(F.avg("final")), "update"
    if name == "q5":
        window = F.window("dateTime", "10 seconds", "2 seconds")
        counts = bid.groupBy(window.alias("w"), "auction").count()
        # the same window again: window_time (end - 1 µs) in 2 s tumbling windows, one per window end
        top = counts.groupBy(F.window(F.window_time("w"), "2 seconds").alias("w2")).agg(F.max("count").alias("maxn"))
        c, t = counts.alias("c"), top.alias("t")
        hot = c.join(t, (F.col("c.w.end") == F.col("t.w2.end")) & (F.col("c.count") >= F.col("t.maxn")))
        return hot.select("c.auction", F.col("c.count").alias("num")), "append"
    if name == "q7":
        top = bid.groupBy(F.window("dateTime", "10 seconds").alias("w")).agg(F.max("price").alias("maxprice"))
        top = top.select("maxprice", F.window_time("w").alias("w_time"))
        b = bid.select("auction", "price", "bidder", F.col("dateTime").alias("b_time"), "extra")
        # BETWEEN window_end - 10 s AND window_end, both bounds on window_time (the end less 1 µs, the
        # aggregate's event time), so that Spark sees a time-interval join and drops old bids
        joined = b.join(top, (F.col("price") == F.col("maxprice")) & F.col("b_time").between(
            F.col("w_time") - F.expr("INTERVAL 9999999 MICROSECONDS"), F.col("w_time")))
        return joined.select("auction", "price", "bidder", "b_time", "extra"), "append"
    if name == "q8":
        p = person.groupBy(F.window("dateTime", "10 seconds").alias("pw"), "id", "name").count()
        a = auction.groupBy(F.window("dateTime", "10 seconds").alias("aw"), "seller").count()
        joined = p.join(a, (F.col("id") == F.col("seller")) & (F.col("pw") == F.col("aw")))
        return joined.select("id", "name", F.col("pw.start").alias("starttime")), "append"
    if name == "q11":
        sessions = bid.groupBy("bidder", F.session_window("dateTime", "10 seconds").alias("s")).count()
        return sessions.select("bidder", F.col("count").alias("bid_count"), "s.start", "s.end"), "append"
    return None


def run_spark_ss(session: Any, name: str, directory: str, events: int, timeout: float,
                 delay: float) -> dict[str, Any]:
    """One timed Spark SS query over the files: the query's own start (planning, first micro-batch)
    included, as Epochal's is; or why it could not run."""
    from pyspark.sql import types as T

    schema = T.StructType.fromJson(session.read.parquet(directory).schema.jsonValue())
    stream = (session.readStream.schema(schema).option("maxFilesPerTrigger", 1).parquet(directory)
              .withWatermark("dateTime", f"{delay * 1000:.0f} milliseconds"))
    checkpoint = tempfile.mkdtemp(prefix="spark-nexmark-chk-")
    try:
        try:
            built = spark_query(name, stream)
            if built is None:
                return {"expressible": False, "reason": SPARK_SS.get(name, "no Spark form written")}
            frame, mode = built
            cpu = cpu_seconds()
            started = time.perf_counter()
            query = (frame.writeStream.format("noop").outputMode(mode).trigger(availableNow=True)
                     .option("checkpointLocation", checkpoint).start())
        except Exception as exc:  # noqa: BLE001 - Spark's analysis refuses the query: say so, with its words
            message = str(exc).strip().splitlines()[0][:400] if str(exc).strip() else type(exc).__name__
            return {"expressible": False, "reason": SPARK_SS.get(name, "Spark refused the query"),
                    "spark_error": message}
        finished = query.awaitTermination(timeout)
        seconds = time.perf_counter() - started
        cpu = _used(cpu, cpu_seconds())
        if not finished:
            query.stop()
        progress = query.recentProgress
        read = sum(int(p["numInputRows"]) for p in progress)
        output = sum(int((p.get("sink") or {}).get("numOutputRows", -1) or 0) for p in progress)
        rate = events / seconds if finished else None
        return {"expressible": True, "finished": bool(finished), "seconds": seconds, "events": events,
                "input_rows": read, "results": output, "batches": len(progress), "output_mode": mode,
                "events_per_s": rate, "events_per_s_per_core": None if rate is None else rate / SPARK_WORKERS,
                "cpu_s": cpu, "events_per_cpu_s": None if not cpu or not finished else events / cpu}
    finally:
        shutil.rmtree(checkpoint, ignore_errors=True)


def epochal_spark_part(session: Any, names: list[str], events: int, queries_dir: str, reps: int,
                       files: str, warmup: str) -> dict[str, Any]:
    """Epochal on Spark, in a child process (`run_on_spark`): each query over the files, best of
    `reps`, after an untimed run over the `warmup` files, as in-process."""
    modules = load_queries(queries_dir, names)
    out: dict[str, Any] = {}
    for name, module in modules.items():
        _guarded(run_epochal, module, min(events, WARMUP_EVENTS), SPARK_WORKERS, session, warmup)
        out[name] = _best([_guarded(run_epochal, module, events, SPARK_WORKERS, session, files)
                           for _ in range(reps)])
    return out


def _best(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The fastest of a system's runs (a failed or stopped run only if all are), with every run's rate."""
    done = [r for r in runs if r.get("events_per_s")]
    if not done:
        return runs[-1]
    best = max(done, key=lambda r: float(r["events_per_s"]))
    return {**best, "runs_events_per_s": [r.get("events_per_s") for r in runs]}


def spark_ss_part(session: Any, name: str, events: int, directory: str, warmup: str, queries_dir: str,
                  query_timeout: float, reps: int) -> dict[str, Any]:
    """One query on Spark SS, best of `reps`, in a child process of its own (a fresh JVM: one
    query's memory cannot fail the next), after an untimed run over the `warmup` files."""
    session.conf.set("spark.sql.shuffle.partitions", str(SPARK_WORKERS))
    session.sparkContext.setLogLevel("ERROR")
    delay = watermark_delay(queries_dir)
    _guarded(run_spark_ss, session, name, warmup, min(events, WARMUP_EVENTS), query_timeout, delay)
    first = _guarded(run_spark_ss, session, name, directory, events, query_timeout, delay)
    if not first.get("finished"):  # not expressible, failed or stopped: once is enough
        return first
    return _best([first] + [_guarded(run_spark_ss, session, name, directory, events, query_timeout, delay)
                            for _ in range(reps - 1)])


def _on_spark(function: str, **kwargs: Any) -> Any:
    """`function(session, **kwargs)` of this module in a child process on a `SPARK_MASTER` session
    with SPARK_DRIVER_MEMORY for its JVM (headroom for the join states of q3, q7 and q8)."""
    saved = os.environ.get("PYSPARK_SUBMIT_ARGS")
    os.environ["PYSPARK_SUBMIT_ARGS"] = f"--driver-memory {SPARK_DRIVER_MEMORY} pyspark-shell"
    try:
        return run_on_spark(SPARK_MASTER, "benchmarks.nexmark", function, timeout=3600, **kwargs)
    finally:
        if saved is None:
            del os.environ["PYSPARK_SUBMIT_ARGS"]
        else:
            os.environ["PYSPARK_SUBMIT_ARGS"] = saved


def _guarded(fn: Callable[..., dict[str, Any]], *args: Any) -> dict[str, Any]:
    """`fn(*args)`, or its failure (the other queries still run)."""
    try:
        return fn(*args)
    except Exception as exc:  # noqa: BLE001 - reported in the row
        return {"error": f"{type(exc).__name__}: {str(exc).strip()[:600]}"}


# -- the benchmark ----------------------------------------------------------------------------------


def measure(events: int, directory: str, spark: bool = True, reps: int = 1, queries_dir: str | None = None,
            only: Sequence[str] | None = None, profile_events: int = PROFILE_EVENTS) -> dict[str, Any]:
    """Every query present on every system, on one stream of `events` events."""
    queries_dir = queries_dir or QUERIES_DIR
    modules = load_queries(queries_dir, only)
    files = os.path.join(directory, "events")
    started = time.perf_counter()
    written = len(write_events(files, events))
    files_seconds = round(time.perf_counter() - started, 1)
    warmup = os.path.join(directory, "warmup")
    write_events(warmup, min(events, WARMUP_EVENTS))
    rows: list[dict[str, Any]] = []
    for name, module in modules.items():
        run_epochal(module, min(events, WARMUP_EVENTS), files=warmup)  # imports, caches
        runs = [run_epochal(module, events, files=files) for _ in range(reps)]  # the same files as Spark SS
        generated = [run_epochal(module, events) for _ in range(reps)]  # the generator in the job
        rows.append({"query": name, "description": module.DESCRIPTION, "flink_13": FLINK_13.get(name),
                     "epochal": _best(runs), "epochal_generated": _best(generated)})
        sql_path = os.path.join(queries_dir, "sql", f"{name}.py")
        if os.path.exists(sql_path):  # the same query in SQL (env.sql), on the same files
            sql = load_query(sql_path)
            run_epochal(sql, min(events, WARMUP_EVENTS), files=warmup)
            rows[-1]["epochal_sql"] = _best([run_epochal(sql, events, files=files) for _ in range(reps)])
    result: dict[str, Any] = {
        "events": events, "seed": SEED, "watermark_delay": watermark_delay(queries_dir), "batch": BATCH,
        "checkpoint_interval": CHECKPOINT_INTERVAL, "reps": reps, "spark_master": SPARK_MASTER,
        "file_events": FILE_EVENTS, "spark_query_timeout": SPARK_QUERY_TIMEOUT, "rows": rows,
        "flink_setup": FLINK_SETUP, "files": written, "files_seconds": files_seconds,
        "load": os.getloadavg(),
    }
    if spark:
        parts = [("epochal_spark", "epochal_spark_part", {"names": list(modules), "events": events,
                                                          "queries_dir": queries_dir, "reps": reps,
                                                          "files": files, "warmup": warmup})]
        parts += [(name, "spark_ss_part", {"name": name, "events": events, "directory": files, "warmup": warmup,
                                           "queries_dir": queries_dir, "query_timeout": SPARK_QUERY_TIMEOUT,
                                           "reps": reps})
                  for name in modules]
        by_query = {row["query"]: row for row in rows}
        for what, function, kwargs in parts:
            try:
                found = _on_spark(function, **kwargs)
            except (RuntimeError, OSError, subprocess.TimeoutExpired) as exc:  # the report says which failed
                failure = {"error": f"{type(exc).__name__}: {str(exc).strip()[-1500:]}"}
                found = {name: failure for name in modules} if what == "epochal_spark" else failure
            if what == "epochal_spark":
                for name, row in by_query.items():
                    row["epochal_spark"] = found[name]
            else:
                by_query[what]["spark_ss"] = found
    profiled = os.path.join(directory, "profiled")
    write_events(profiled, min(events, profile_events))
    for row in rows:
        if shortfalls(row):
            row["profile"] = _guarded(profile_epochal, modules[row["query"]], min(events, profile_events), 12,
                                      profiled)
    result["load_end"] = os.getloadavg()
    return result


def shortfalls(row: dict[str, Any]) -> list[str]:
    """The targets the query misses (behind Flink 1.13 per core; under 5x Spark SS per core)."""
    mine = _per_core(row, "epochal")
    out = []
    if row.get("flink_13") and mine is not None and mine <= row["flink_13"]:
        out.append("Flink 1.13")
    spark = _per_core(row, "spark_ss")
    if mine is not None and spark and mine < SPARK_SS_TARGET * spark:
        out.append(f"{SPARK_SS_TARGET:g}x Spark SS")
    return out


@benchmark("nexmark", "Nexmark queries: events/s per core against Spark SS and Flink 1.13's published figures")
def run(quick: bool) -> dict[str, Any]:
    events = 300_000 if quick else int(os.environ.get("EPOCHAL_NEXMARK_EVENTS", 5_000_000))
    reps = 1 if quick else int(os.environ.get("EPOCHAL_NEXMARK_REPS", 2))
    directory = tempfile.mkdtemp(prefix="epochal-nexmark-")
    try:
        result = measure(events, directory, reps=reps)
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    _plot(result)
    result["summary"] = _summary(result)
    return result


# -- report -----------------------------------------------------------------------------------------


def _per_core(row: dict[str, Any], system: str) -> float | None:
    found = row.get(system) or {}
    rate = found.get("events_per_s_per_core")
    return None if rate is None else float(rate)


def _k(rate: float | None) -> str:
    return "—" if rate is None else f"{rate / 1e3:,.0f} K"


def _ratio(a: float | None, b: float | None) -> str:
    return "—" if a is None or not b else f"{a / b:.1f}×"


def _spark_ss_cell(row: dict[str, Any]) -> str:
    ss = row.get("spark_ss")
    if ss is None:
        return "not run"
    if "error" in ss:
        return "failed (see below)"
    if not ss["expressible"]:
        return "not expressible in Spark SS"
    if not ss["finished"]:
        return f"stopped after {ss['seconds']:.0f} s"
    return _k(ss["events_per_s_per_core"])


def verdicts(result: dict[str, Any]) -> list[str]:
    """The issue's two targets, each with the numbers it was judged on."""
    rows = result["rows"]
    out = []
    for system, label in (("epochal", "in-process"), ("epochal_spark", "on Spark")):
        judged = [r for r in rows if r.get("flink_13") and _per_core(r, system) is not None]
        behind = [f"{r['query']} ({_k(_per_core(r, system))} vs {_k(r['flink_13'])})" for r in judged
                  if (_per_core(r, system) or 0.0) <= r["flink_13"]]
        missing = [r["query"] for r in rows if r.get("flink_13") and _per_core(r, system) is None]
        absent = [q for q in FLINK_13 if q not in {r["query"] for r in rows}]
        verdict = "not met" if behind else "not shown: queries missing" if missing or absent else "met"
        out.append(f"**Per core ahead of Flink 1.13 on every query** (Epochal {label}): ahead on "
                   f"{len(judged) - len(behind)} of {len(judged)}"
                   + (f"; behind on {', '.join(behind)}" if behind else "")
                   + (f"; not measured: {', '.join(missing)}" if missing else "")
                   + (f"; not in examples/nexmark yet: {', '.join(absent)}" if absent else "") + f": {verdict}.")
    judged = [r for r in rows if _per_core(r, "spark_ss") and _per_core(r, "epochal") is not None]
    short = [f"{r['query']} ({_ratio(_per_core(r, 'epochal'), _per_core(r, 'spark_ss'))})" for r in judged
             if (_per_core(r, "epochal") or 0.0) < SPARK_SS_TARGET * (_per_core(r, "spark_ss") or 0.0)]
    unmeasured = [r["query"] for r in rows if not _per_core(r, "spark_ss")]
    verdict = "not met" if short else "met"
    out.append(f"**≥ {SPARK_SS_TARGET:g}× Spark SS per core** (Epochal in-process against Spark SS): at least "
               f"{SPARK_SS_TARGET:g}× on {len(judged) - len(short)} of the {len(judged)} queries Spark SS ran"
               + (f"; short on {', '.join(short)}" if short else "")
               + (f"; Spark SS did not run {', '.join(unmeasured)}" if unmeasured else "") + f": {verdict}.")
    by_cpu = [r for r in judged if _per_cpu(r, "epochal") and _per_cpu(r, "spark_ss")]
    if by_cpu:
        short = [f"{r['query']} ({_ratio(_per_cpu(r, 'epochal'), _per_cpu(r, 'spark_ss'))})" for r in by_cpu
                 if (_per_cpu(r, "epochal") or 0.0) < SPARK_SS_TARGET * (_per_cpu(r, "spark_ss") or 0.0)]
        out.append(f"**≥ {SPARK_SS_TARGET:g}× Spark SS per CPU-second used** (the same, counting the CPU each "
                   f"used rather than the cores given): at least {SPARK_SS_TARGET:g}× on {len(by_cpu) - len(short)} "
                   f"of {len(by_cpu)}" + (f"; short on {', '.join(short)}" if short else "")
                   + f": {'not met' if short else 'met'}.")
    return out


def _per_cpu(row: dict[str, Any], system: str) -> float | None:
    found = (row.get(system) or {}).get("events_per_cpu_s")
    return None if found is None else float(found)


def _cores_used(run: dict[str, Any]) -> str:
    """CPU seconds ÷ wall seconds of a run (for Epochal on Spark the wall time of the whole execute())."""
    if not run.get("cpu_s"):
        return "—"
    wall = float(run["seconds"]) + float(run.get("startup_s") or 0.0)
    return f"{float(run['cpu_s']) / wall:.1f}"


def _summary(result: dict[str, Any]) -> str:
    n = result["events"]
    lines = [
        f"{n:,} Nexmark events per query (`NexmarkSource`, seed {result['seed']}, Beam's defaults: persons : "
        "auctions : bids = 1 : 3 : 46, event time at 10,000 events a second of event time, in order), "
        f"watermarks {result['watermark_delay']:g} s behind the largest `dateTime` read (the examples' harness: "
        "the events are in order; the Nexmark project's DDL allows 4 s). Events/s per core "
        "of the whole run, start included, "
        + ("one run each." if result["reps"] == 1 else f"best of {result['reps']} runs on each system.")
        + " Same machine, same run:",
        "",
        f"- **Epochal in-process**: parallelism 1 (one core), batches of {result['batch']:,} events, "
        f"checkpoints every {result['checkpoint_interval']:g} s to a temporary directory, a sink that discards; "
        "reading the same Parquet files Spark SS reads (`ParquetSource(in_order=True)`, each batch put back in "
        "the stream's layout, `connectors.nexmark.flat.unflatten`), and, in its own column, generating the "
        "events in the job (`NexmarkSource`, as the Nexmark project's Flink runs do).",
        f"- **Epochal on Spark**: `{result['spark_master']}`, parallelism {SPARK_WORKERS}, the same files (every "
        "other file a worker), checkpoints and sink; events/s from every worker running to the job finished ÷ 2. The "
        "stage's start-up (execute() to every worker running) is excluded and shown apart.",
        f"- **Spark SS**: Structured Streaming on `{result['spark_master']}` ({SPARK_WORKERS} shuffle "
        "partitions): the same events generated once by the source's generator (before any clock starts), "
        f"flattened to top-level columns, written as {result.get('files', '—')} Parquet files of "
        f"{result['file_events']:,} events, read "
        "with `readStream.schema(...).parquet(dir)` and `withWatermark`; the query in DataFrame form after the "
        "Nexmark project's Flink SQL, `noop` sink, `trigger(availableNow=True)`, one file per micro-batch (a "
        "micro-batch is Spark's checkpoint); each query in a session of its own (a JVM with a "
        f"{SPARK_DRIVER_MEMORY} heap, Spark's default being 1 GB), its start-up excluded, "
        "the query's planning included; events/s ÷ 2.",
        f"- **Flink 1.13 (published)**: the Nexmark project's result table (GUIDE_V1.md), not measured here. "
        f"Their set-up: {result['flink_setup']}. Ours: a 2-core machine shared with other work, Python, the "
        "generator in the job too, Beam's event rate (windows fire and state turns over all through the "
        "run; theirs fire in the last seconds), generated events about as large (extra padding to Beam's "
        "mean sizes), keyed state in memory (Epochal's default backend; theirs in RocksDB) and checkpoints "
        "every second (theirs every 3 minutes). Their per-core figure divides by the cores their workers "
        "used; ours by the cores given. Read the column as a reference point, not a measurement beside ours.",
        "",
        "| query | Epochal in-process /core | Epochal in-process, generating /core | Epochal on Spark /core "
        "(start-up) | Spark SS /core | Flink 1.13 /core (published) | in-process ÷ Flink | in-process ÷ Spark SS | "
        "results: Epochal / Spark SS |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    notes = []
    for r in result["rows"]:
        mine, on_spark = _per_core(r, "epochal"), r.get("epochal_spark") or {}
        spark_cell = "—"
        if "error" in on_spark:
            spark_cell = "failed (see below)"
            notes.append(f"- {r['query']} on Spark failed: `{on_spark['error'][:300]}`")
        elif on_spark:
            spark_cell = f"{_k(on_spark['events_per_s_per_core'])} ({on_spark['startup_s']:.1f} s)"
        ss = r.get("spark_ss") or {}
        if "error" in ss:
            notes.append(f"- {r['query']} on Spark SS failed: `{ss['error'][:300]}`")
        elif ss and not ss["expressible"]:
            said = f" (Spark: `{ss['spark_error'][:200]}`)" if ss.get("spark_error") else ""
            notes.append(f"- {r['query']} is not expressible in Spark SS: {ss['reason']}{said}.")
        counts = f"{r['epochal']['results']:,} / " + (f"{ss['results']:,}" if ss.get("finished") else "—")
        lines.append(
            f"| {r['query']} | {_k(mine)} | {_k(_per_core(r, 'epochal_generated'))} | {spark_cell} | "
            f"{_spark_ss_cell(r)} | {_k(r['flink_13'])} | "
            f"{_ratio(mine, r['flink_13'])} | {_ratio(mine, _per_core(r, 'spark_ss'))} | {counts} |")
    with_sql = [r for r in result["rows"] if r.get("epochal_sql")]
    if with_sql:
        lines += ["", "The queries in SQL (`examples/nexmark/sql/`, `env.sql`) beside their DataStream versions, "
                  "Epochal in-process, the same files:", "",
                  "| query | DataStream /core | SQL /core | SQL ÷ DataStream | results (DataStream / SQL) |",
                  "|---|---:|---:|---:|---:|"]
        for r in with_sql:
            sql_rate = _per_core(r, "epochal_sql")
            lines.append(f"| {r['query']} | {_k(_per_core(r, 'epochal'))} | {_k(sql_rate)} | "
                         f"{_ratio(sql_rate, _per_core(r, 'epochal'))} | "
                         f"{r['epochal']['results']:,} / {r['epochal_sql']['results']:,} |")
    lines += ["", "Queries, as the examples describe them:", ""]
    lines += [f"- {r['query']}: {r['description']}" for r in result["rows"]]
    if notes:
        lines += ["", *notes]
    lines += ["", "Per CPU-second used (user + system time of the process tree measured from /proc, as the Nexmark "
              "project counts cores; Epochal on Spark over its whole execute(), start-up included):", "",
              "| query | Epochal in-process /CPU-s (cores used) | Epochal on Spark /CPU-s (cores used) | "
              "Spark SS /CPU-s (cores used) | in-process ÷ Spark SS |", "|---|---:|---:|---:|---:|"]
    for r in result["rows"]:
        cells = [f"{_k(_per_cpu(r, s))} ({_cores_used(r.get(s) or {})})" if _per_cpu(r, s) else "—"
                 for s in ("epochal", "epochal_spark", "spark_ss")]
        versus = _ratio(_per_cpu(r, "epochal"), _per_cpu(r, "spark_ss"))
        lines.append(f"| {r['query']} | {' | '.join(cells)} | {versus} |")
    lines += ["", "Spark SS emits a window only once a later micro-batch's watermark passes its end, and has no "
              "end of input: the windows of the last seconds are never emitted, so its result counts of "
              "windowed queries are lower than Epochal's (which fires them at the end of the input).",
              "", f"Load average (1 min) on {os.cpu_count()} shared cores: "
              + (f"{result['load'][0]:.1f} after the in-process runs" if result.get("load") else "not recorded")
              + (f", {result['load_end'][0]:.1f} at the end." if result.get("load_end") else "."),
              "", "Targets (issues 17 and 36; against Spark SS, Epochal reading the same files):", ""]
    lines += [f"- {v}" for v in verdicts(result)]
    for r in result["rows"]:
        prof = r.get("profile")
        if not prof or "error" in prof:
            continue
        lines += ["", f"**Where the time goes: {r['query']}** (short of {', '.join(shortfalls(r))}; cProfile of an "
                  f"in-process run of {prof['events']:,} events, {prof['profiled_s']:.1f} s under the profiler):",
                  "", "| area | share of the time |", "|---|---:|"]
        lines += [f"| {area} | {share:.0%} |" for area, share in prof["areas"].items() if share >= 0.01]
        lines += ["", "| function | calls | cumulative s | share |", "|---|---:|---:|---:|"]
        lines += [f"| `{f['function']}` | {f['calls']:,} | {f['cumulative_s']:.2f} | {f['cumulative_share']:.0%} |"
                  for f in prof["functions"]]
        if r["query"] in CLOSE_THE_GAP:
            lines += ["", f"What would close it: {CLOSE_THE_GAP[r['query']]}"]
    if "spark_error" in result:
        lines += ["", "Spark failed: `" + result["spark_error"].strip().splitlines()[-1] + "`"]
    lines += ["", "![Nexmark events/s per core](img/nexmark.png)", ""]
    return "\n".join(lines)


def _plot(result: dict[str, Any]) -> None:
    plt = pyplot()
    if plt is None:
        return
    rows = result["rows"]
    systems: list[tuple[str, Callable[[dict[str, Any]], float | None], str]] = [
        ("Epochal in-process", lambda r: _per_core(r, "epochal"), "#4C72B0"),
        ("Epochal on Spark", lambda r: _per_core(r, "epochal_spark"), "#8172B2"),
        ("Spark SS", lambda r: _per_core(r, "spark_ss"), "#55A868"),
        ("Flink 1.13 (published)", lambda r: r.get("flink_13"), "#C44E52"),
    ]
    fig, ax = plt.subplots(figsize=(max(7.5, 0.9 * len(rows) + 3), 4.5))
    width = 0.8 / len(systems)
    for i, (label, value, color) in enumerate(systems):
        xs = [j + (i - 1.5) * width for j, r in enumerate(rows) if value(r)]
        ys = [float(value(r) or 0.0) / 1e3 for r in rows if value(r)]
        ax.bar(xs, ys, width, label=label, color=color)
    ax.set_xticks(range(len(rows)))
    ax.set_xticklabels([r["query"] for r in rows])
    ax.set_yscale("log")
    ax.set_ylabel("thousand events/s per core")
    ax.set_title("Nexmark: events/s per core (a missing bar: not run or not expressible)")
    ax.legend(fontsize=8)
    ax.grid(True, axis="y", which="both", alpha=0.3)
    fig.tight_layout()
    save_figure(fig, "nexmark.png")
