"""What live metrics cost: the ABS benchmark job with metrics gathered, served and scraped, against
the same job with none (issue 20's target: at most 1 %).

The job is `abs_eval`'s (the ABS paper's Fig. 5 program: six operators, three shuffles, per-record
path) with ABS checkpoints every second, 2 subtasks per operator, in-process and on Spark with two
workers. Two settings, run back to back in pairs whose order alternates, so a machine whose speed
drifts for minutes at a time favours neither:

- **off**: `metrics_interval=None`, no control endpoint: no worker reports, no snapshots.
- **on**: the default `metrics_interval` (workers report every second, the job master publishes a
  snapshot twice a second), the control endpoint, and a scraper in another process that fetches
  `/metrics` (as Prometheus does) and `/metrics.json` (as an open dashboard does) every second.

What a job always does, with or without live metrics, is in both: per-batch record counters
(the `JobResult` needs them) and two clock reads per scheduling run (the time slice needs them).
The cost is the median over pairs of `on / off - 1` in run time. On two shared cores pairs
scatter by more than the target, so the in-process runs also *account* for the cost: the time
spent inside the metrics code (the job master's snapshots, with the tasks' `task_metrics`) and
the CPU time of the endpoint's threads serving the scrapes, as a share of the run. In-process
all of it competes with the job for one interpreter: an upper bound of what a Spark worker
(which only reports its tasks' counters) pays.
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from .abs_eval import abs_env, run_sizes
from .runner import benchmark, pyplot, save_figure
from .spark_subprocess import run_on_spark

INTERVAL = 1.0  # seconds between ABS checkpoints
TARGET = 0.01  # the bound on the cost of metrics

# A scraper as Prometheus and an open dashboard would be: another process, one fetch each a second.
_SCRAPER = r"""
import sys, time, urllib.request
url = sys.argv[1]
ready = False
while True:
    for path in ("/metrics", "/metrics.json"):
        try:
            urllib.request.urlopen(url + path, timeout=5).read()
        except OSError:
            pass
    if not ready:  # started and scraping: the run may begin (its start-up is not the job's cost)
        print("ready", flush=True)
        ready = True
    time.sleep(1.0)
"""


@contextmanager
def _accounting() -> Iterator[dict[str, float]]:
    """Seconds spent in the job master's metrics snapshots, and CPU seconds of the endpoint's
    request threads, while the block runs (this process only)."""
    from http.server import BaseHTTPRequestHandler

    from epochal.runtime.master.job_master import JobMaster

    spent = {"snapshots_s": 0.0, "serving_cpu_s": 0.0}
    lock = threading.Lock()
    report, handle = JobMaster.report_progress, BaseHTTPRequestHandler.handle

    def timed_report(self: Any, tasks: Any, now: bool = False) -> None:
        started = time.perf_counter()
        report(self, tasks, now)
        spent["snapshots_s"] += time.perf_counter() - started

    def timed_handle(self: Any) -> None:
        started = time.thread_time()
        handle(self)
        with lock:
            spent["serving_cpu_s"] += time.thread_time() - started

    JobMaster.report_progress, BaseHTTPRequestHandler.handle = timed_report, timed_handle  # type: ignore[method-assign]
    try:
        yield spent
    finally:
        JobMaster.report_progress, BaseHTTPRequestHandler.handle = report, handle  # type: ignore[method-assign]


def run_once(records: int, metrics: bool, session: Any = None) -> dict[str, Any]:
    """One run: its seconds (in-process: the whole execute; Spark: workers running → finished)."""
    from epochal.cluster.endpoint import ControlEndpoint
    from epochal.runtime.master.control import JobControl

    directory = tempfile.mkdtemp(prefix="epochal-metrics-cost-")
    env = abs_env(records, 2, "aligned", INTERVAL, directory, session, metrics_interval=1.0 if metrics else None)
    job = env.job_graph("metrics-on" if metrics else "metrics-off")
    control = JobControl(job.name, 2)
    endpoint = ControlEndpoint(control, "127.0.0.1", 0) if metrics else None
    scraper = None
    if endpoint is not None:
        scraper = subprocess.Popen([sys.executable, "-c", _SCRAPER, endpoint.url], stdout=subprocess.PIPE, text=True)
        assert scraper.stdout is not None and scraper.stdout.readline().strip() == "ready"
    try:
        accounted: dict[str, float] = {}
        if session is None:
            from epochal.cluster.inprocess import InProcessExecutor

            with _accounting() as accounted:
                started, cpu = time.perf_counter(), time.process_time()
                result = InProcessExecutor().execute(job, None, control)
                seconds = time.perf_counter() - started
                accounted["cpu_s"] = time.process_time() - cpu  # every thread of this process
        else:
            from epochal.cluster.spark import SparkExecutor

            executor = SparkExecutor(session)
            result = executor.execute(job, None, control)
            events = dict(executor.timeline)
            seconds = events["finished"] - events["running"]
        counted = result.operator("count").records_in
        if counted != records:
            raise RuntimeError(f"the count saw {counted} records of {records}")
        return {"metrics": metrics, "seconds": seconds, "records_per_s": records / seconds,
                "checkpoints": len(result.checkpoints), **accounted}
    finally:
        if scraper is not None:
            scraper.kill()
            scraper.wait()
        if endpoint is not None:
            endpoint.close()
        shutil.rmtree(directory, ignore_errors=True)


def pairs(records: int, rounds: int, session: Any = None) -> dict[str, Any]:
    """`rounds` pairs of runs, off then on, then on then off, ...; each pair's cost."""
    out = []
    for i in range(rounds):
        order = (False, True) if i % 2 == 0 else (True, False)
        runs = {m: run_once(records, m, session) for m in order}
        out.append({"off": runs[False], "on": runs[True],
                    "cost": runs[True]["seconds"] / runs[False]["seconds"] - 1})
    costs = [p["cost"] for p in out]
    return {"records": records, "pairs": out, "median_cost": statistics.median(costs),
            "min_cost": min(costs), "max_cost": max(costs)}


def spark_pairs(session: Any, records: int, rounds: int) -> dict[str, Any]:
    return pairs(records, rounds, session)


@benchmark("metrics_cost", "The cost of live metrics on the ABS benchmark job (ABS at 1 s)")
def run(quick: bool) -> dict[str, Any]:
    records, spark_records = run_sizes(quick)
    rounds = 1 if quick else int(os.environ.get("EPOCHAL_METRICS_ROUNDS", 4))
    hosts = {
        "in-process": pairs(records, rounds),
        "spark local[2]": run_on_spark("local[2]", "benchmarks.metrics_cost", "spark_pairs",
                                       records=spark_records, rounds=rounds),
    }
    result: dict[str, Any] = {"rounds": rounds, "hosts": hosts, "target": TARGET}
    _plot(result)
    result["summary"] = _summary(result)
    return result


def _summary(result: dict[str, Any]) -> str:
    lines = [
        "The ABS benchmark job (`abs_eval`'s Fig. 5 program, 2 subtasks per operator, ABS checkpoints "
        "every second), run in pairs: **off** (`metrics_interval=None`, no endpoint) and **on** (workers "
        "report every second, the job master publishes twice a second, the control endpoint runs, and a "
        "scraper in another process fetches `/metrics` and `/metrics.json` every second). The order "
        "alternates from pair to pair. Cost = on's run time / off's − 1, per pair.",
        "",
        "| Host | Records | Pairs | Off (records/s, median) | On (records/s, median) | Cost (median) | "
        "Cost (min … max) |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for host, h in result["hosts"].items():
        off = statistics.median(p["off"]["records_per_s"] for p in h["pairs"])
        on = statistics.median(p["on"]["records_per_s"] for p in h["pairs"])
        lines.append(
            f"| {host} | {h['records']:,} | {len(h['pairs'])} | {off:,.0f} | {on:,.0f} | "
            f"{h['median_cost']:+.2%} | {h['min_cost']:+.2%} … {h['max_cost']:+.2%} |"
        )
    inproc = [p["on"] for p in result["hosts"]["in-process"]["pairs"]]
    share = [(r["snapshots_s"] + r["serving_cpu_s"]) / r["seconds"] for r in inproc]
    snap = statistics.median(r["snapshots_s"] / r["seconds"] for r in inproc)
    serve = statistics.median(r["serving_cpu_s"] / r["seconds"] for r in inproc)
    cpu_costs = [p["on"]["cpu_s"] / p["off"]["cpu_s"] - 1 for p in result["hosts"]["in-process"]["pairs"]]
    lines += [
        "",
        f"Accounted in-process (the **on** runs): the job master's snapshots take {snap:.3%} of the run "
        f"and serving the scrapes {serve:.3%} of it in CPU time: **{statistics.median(share):.2%}** in all "
        f"(at most {max(share):.2%}). The same pairs by the process's CPU time (all its threads, so a "
        f"descheduled process costs nothing): median {statistics.median(cpu_costs):+.2%} "
        f"({min(cpu_costs):+.2%} … {max(cpu_costs):+.2%}).",
    ]
    worst = max(h["median_cost"] for h in result["hosts"].values())
    accounted = statistics.median(share)
    lines += [
        "",
        f"Target: at most {result['target']:.0%}. By accounting, "
        f"{'met' if accounted <= result['target'] else 'NOT met'} ({accounted:.2%}). By the pairs, "
        f"{'met' if worst <= result['target'] else 'not shown'}: their larger median is {worst:+.2%}, and "
        "identical runs on these two shared cores scatter by more than that (see the min … max column and "
        "the plot), so the pairs bound the cost only to within the machine's noise. "
        "Per-batch record counters and two clock reads per scheduling run are in both settings (every "
        "job needs them), so they are not in the cost.",
        "",
        "![Run time of each pair, off and on](img/metrics_cost.png)",
    ]
    return "\n".join(lines)


def _plot(result: dict[str, Any]) -> None:
    plt = pyplot()
    if plt is None:
        return
    hosts = list(result["hosts"].items())
    fig, axes = plt.subplots(1, len(hosts), figsize=(5 * len(hosts), 3.5), squeeze=False)
    for ax, (host, h) in zip(axes[0], hosts, strict=True):
        n = range(1, len(h["pairs"]) + 1)
        ax.plot(n, [p["off"]["seconds"] for p in h["pairs"]], "o-", label="metrics off")
        ax.plot(n, [p["on"]["seconds"] for p in h["pairs"]], "s-", label="metrics on, served, scraped")
        ax.set_title(f"{host}: median cost {h['median_cost']:+.2%}")
        ax.set_xlabel("pair")
        ax.set_ylabel("run time (s)")
        ax.set_xticks(list(n))
        ax.legend()
    fig.tight_layout()
    save_figure(fig, "metrics_cost")
