"""Checkpoint modes under backpressure: aligned (ABS), unaligned, and at-least-once (issue 21).

An aligned barrier waits behind every batch queued ahead of it, and alignment holds the inputs
that delivered it until the slowest one does; under backpressure (a slow sink) that is the whole
backlog of every channel on the way. An unaligned barrier overtakes the backlog and stores it
with the state; an at-least-once barrier is only counted. The job: a sequence source (2 splits)
→ a keyed running sum → a sink, 2 subtasks each, checkpoints every second, on Spark with two
workers (in-process for `--quick`). Two sinks: *slow* (sleeps 25 µs a record: the job runs at
the sink's pace, every channel full) and *fast* (discards: no backpressure, what each mode costs
when nothing waits). Per run: throughput, and per periodic checkpoint its duration (trigger to
manifest), the longest alignment of a task (first barrier to snapshot; at-least-once: first to last
barrier, during which nothing waits), and the bytes written (in-flight data included).
"""

from __future__ import annotations

import os
import shutil
import statistics
import sys
import tempfile
import time
from typing import Any

import pyarrow as pa

from epochal.api.connector import Sink, SinkWriter

from . import workloads as w
from .abs_eval import _manifest_stats, _percentile, periodic_checkpoints
from .runner import benchmark, pyplot, save_figure, timed_execute

MODES = ("aligned", "unaligned", "at_least_once")
SINKS = ("slow", "fast")
SLOW_SINK_S = 25e-6  # seconds a record at the slow sink
KEYS = 1_000
FAST_FACTOR = 12  # the fast sink's runs get this many times the records: several checkpoints each


class _SlowWriter(SinkWriter):
    def __init__(self, seconds_per_record: float) -> None:
        self.seconds_per_record = seconds_per_record

    def write(self, batch: Any) -> None:
        rows = batch.num_rows if isinstance(batch, pa.RecordBatch) else len(batch)
        time.sleep(rows * self.seconds_per_record)


class SlowSink(Sink):
    """A sink that takes `seconds_per_record` for each record: the slow end of a job."""

    def __init__(self, seconds_per_record: float) -> None:
        self.seconds_per_record = seconds_per_record

    def create_writer(self, subtask: int, parallelism: int) -> SinkWriter:
        return _SlowWriter(self.seconds_per_record)


def run_once(records: int, mode: str, sink: str, session: Any = None, interval: float = 1.0) -> dict[str, Any]:
    from epochal import CheckpointConfig, StreamEnvironment

    directory = tempfile.mkdtemp(prefix="epochal-modes-")
    try:
        env = StreamEnvironment(
            parallelism=2, executor="spark" if session else "inprocess", spark=session,
            checkpoint=CheckpointConfig(interval=interval, directory=directory, mode=mode, retain=1_000_000),  # type: ignore[arg-type]
        )
        out = SlowSink(SLOW_SINK_S) if sink == "slow" else w.NullSink()
        (env.from_source(w.GeneratorSource(records, 2, KEYS), name="source")
            .key_by(w.first).reduce(w.add_values, name="sum")
            .sink_to(out, name="sink"))
        result, seconds = timed_execute(env.job_graph(f"modes-{mode}-{sink}"), session)
        summed = result.operator("sum").records_in
        if summed < records:  # at-least-once may count a record twice after a failure; none here
            raise RuntimeError(f"the sum saw {summed} records of {records}")
        checkpoints = periodic_checkpoints({"checkpoints": _manifest_stats(directory)})
        return {
            "mode": mode, "sink": sink, "records": records, "seconds": seconds,
            "records_per_s": records / seconds, "checkpoints": checkpoints,
        }
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def _row(run: dict[str, Any]) -> dict[str, Any]:
    cps = run["checkpoints"]
    durations = [c["duration_ms"] for c in cps]
    alignments = [max(c["alignment_ms"], default=0.0) for c in cps]
    return {
        "mode": run["mode"], "sink": run["sink"], "records_per_s": run["records_per_s"],
        "checkpoints": len(cps),
        "duration_ms_median": statistics.median(durations) if durations else None,
        "duration_ms_p90": _percentile(durations, 90) if durations else None,
        "duration_ms_max": max(durations, default=None),
        "alignment_ms_median": statistics.median(alignments) if alignments else None,
        "written_kb_median": statistics.median(c["written"] for c in cps) / 1024 if cps else None,
    }


@benchmark("checkpoint_modes", "Checkpoint modes under backpressure: aligned, unaligned, at-least-once")
def run(quick: bool) -> dict[str, Any]:
    from pyspark import cloudpickle

    session = None
    if not quick:
        from epochal.cluster.spark import default_session

        cloudpickle.register_pickle_by_value(sys.modules[__name__])  # type: ignore[no-untyped-call]
        session = default_session(2)
    records = 30_000 if quick else int(os.environ.get("EPOCHAL_MODES_RECORDS", 600_000))
    rounds = 1 if quick else 2
    runs = []
    for round_ in range(rounds):  # rounds alternate the order: a drifting machine favours no mode
        order = [(m, s) for s in SINKS for m in MODES]
        for mode, sink in order if round_ % 2 == 0 else reversed(order):
            n = records if sink == "slow" else FAST_FACTOR * records  # runs of a similar length
            runs.append(run_once(n, mode, sink, session, interval=0.1 if quick else 1.0))
    rows = []
    for sink in SINKS:
        for mode in MODES:
            mine = [_row(r) for r in runs if r["mode"] == mode and r["sink"] == sink]
            best = max(mine, key=lambda r: r["records_per_s"])
            best["records_per_s_runs"] = [r["records_per_s"] for r in mine]
            durations = [d for r in runs if r["mode"] == mode and r["sink"] == sink
                         for d in (c["duration_ms"] for c in r["checkpoints"])]
            best["duration_ms_median"] = statistics.median(durations) if durations else None
            best["duration_ms_p90"] = _percentile(durations, 90) if durations else None
            best["duration_ms_max"] = max(durations, default=None)
            rows.append(best)
    result = {
        "host": "in-process" if quick else "spark (local[2], 2 workers)", "records": records,
        "interval": 0.1 if quick else 1.0, "slow_sink_us_per_record": SLOW_SINK_S * 1e6, "rows": rows, "runs": runs,
    }
    _plot(result)
    result["summary"] = _summary(result)
    return result


def _fmt(value: float | None, digits: int = 0) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def _summary(result: dict[str, Any]) -> str:
    lines = [
        f"{result['records']:,} records through the slow sink, {FAST_FACTOR}x as many through the fast "
        f"one, {result['interval']:g} s checkpoints, 2 subtasks per operator, {result['host']}; "
        f"slow sink: {result['slow_sink_us_per_record']:.0f} µs a record. Throughput: the best of the "
        "runs; checkpoint durations: over every periodic checkpoint of all runs.",
        "",
        "| Sink | Mode | Records/s | Each run | Checkpoints | Duration median (ms) | p90 (ms) | max (ms) | "
        "Alignment median (ms) | Written median (KB) |",
        "|---|---|---:|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in result["rows"]:
        lines.append(
            f"| {r['sink']} | {r['mode']} | {_fmt(r['records_per_s'])} | "
            f"{' / '.join(_fmt(x) for x in r.get('records_per_s_runs', ()))} | {r['checkpoints']} | "
            f"{_fmt(r['duration_ms_median'])} | {_fmt(r['duration_ms_p90'])} | {_fmt(r['duration_ms_max'])} | "
            f"{_fmt(r['alignment_ms_median'], 1)} | {_fmt(r['written_kb_median'], 1)} |"
        )
    by = {(r["sink"], r["mode"]): r for r in result["rows"]}
    aligned, unaligned = by[("slow", "aligned")], by[("slow", "unaligned")]
    if aligned["duration_ms_median"] and unaligned["duration_ms_median"]:
        lines += ["", (
            f"Under backpressure a checkpoint took {aligned['duration_ms_median']:,.0f} ms aligned and "
            f"{unaligned['duration_ms_median']:,.0f} ms unaligned (medians), "
            f"{aligned['duration_ms_median'] / unaligned['duration_ms_median']:.1f}x shorter; "
            f"unaligned checkpoints wrote {_fmt(unaligned['written_kb_median'], 1)} KB against "
            f"{_fmt(aligned['written_kb_median'], 1)} KB (the data in flight)."
        )]
    lines += ["", (
        "Runs of one mode differ by up to a quarter in throughput on these shared cores, as much as "
        "the modes differ: no mode costs throughput measurably here. What at-least-once saves is "
        "blocking, which matters when one input is much later than the other; here both inputs "
        "of a task are equally backlogged, so its checkpoints take as long as aligned ones."
    ), "", "![checkpoint duration by mode](img/checkpoint-modes.png)"]
    return "\n".join(lines)


def _plot(result: dict[str, Any]) -> None:
    plt = pyplot()
    if plt is None:
        return
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    for ax, sink in zip(axes, SINKS, strict=True):
        data = [[c["duration_ms"] for r in result["runs"] if r["mode"] == m and r["sink"] == sink
                 for c in r["checkpoints"]] or [0.0] for m in MODES]
        ax.boxplot(data, tick_labels=list(MODES))
        ax.set_yscale("log")
        ax.set_title(f"{sink} sink" + (" (backpressure)" if sink == "slow" else ""))
        ax.set_ylabel("checkpoint duration (ms)")
    fig.tight_layout()
    save_figure(fig, "checkpoint-modes.png")
