"""Checkpoints of busy loops (issue 37): duration p50/p99 and the first commit's delay.

Two loops and a loop-free baseline, each at parallelism 2 with checkpoints every `INTERVAL`
seconds, in-process and on Spark (`local[2]`):

- *halving*: issue 37's loop: numbers in [2^19, 2^20) halved until zero, the feedback keyed,
  every value written (80,000 inputs, 1.6 million values round the loop, in-process; on Spark
  each halving takes `SPARK_UDF_S` in the UDF, as the issue measured, on fewer inputs);
- *components*: `examples/connected_components.py` on a random graph, labels fed back round
  the loop until none changes;
- *loop-free*: the halving job's values, all known up front, through the same keyed map and
  sink with no loop: what a checkpoint costs where nothing goes round.

Per run: wall time; per periodic checkpoint, its duration (trigger to manifest) and bytes
(the loop logs included); the first commit's delay (the run's start to its first complete
checkpoint, when an exactly-once sink first commits). Before issue 37 the halving loop at
parallelism 2 completed only its final checkpoint (`docs/concepts/loops.md` has that run).
"""

from __future__ import annotations

import importlib
import os
import shutil
import statistics
import sys
import tempfile
import time
from typing import Any

from . import workloads as w
from .abs_eval import _percentile
from .runner import benchmark, pyplot, save_figure

INTERVAL = 0.3
SPARK_UDF_S = 50e-6
JOBS = ("halving", "components", "loop-free")


def _halve(n: int) -> int:
    return n // 2


def _slow_halve(n: int) -> int:
    time.sleep(SPARK_UDF_S)
    return n // 2


def _values(inputs: int) -> list[int]:
    import random

    rng = random.Random(37)
    return [rng.randrange(1 << 19, 1 << 20) for _ in range(inputs)]


def _build(job: str, inputs: int, directory: str, session: Any) -> Any:
    from epochal import CheckpointConfig, StreamEnvironment
    from epochal.connectors import FileSink
    from epochal.testing import ListSource

    env = StreamEnvironment(
        parallelism=2, executor="spark" if session else "inprocess", spark=session, batch_size=256,
        checkpoint=CheckpointConfig(interval=INTERVAL, directory=os.path.join(directory, "ckpt"), retain=100_000),
    )
    halve = _slow_halve if session else _halve
    out = FileSink(os.path.join(directory, "out"))
    if job == "halving":
        def body(loop: Any) -> tuple[Any, Any]:
            halved = loop.map(halve, name="halve")
            return halved.filter(lambda n: n > 0, name="again").key_by(lambda n: n), halved

        env.from_source(ListSource(_values(inputs), splits=2)).iterate(body, name="loop").sink_to(out)
    elif job == "loop-free":
        values = [v >> k for v in _values(inputs) for k in range(0, v.bit_length())]  # what enters `halve`
        env.from_source(ListSource(values, splits=2)).key_by(lambda n: n).map(halve, name="halve").sink_to(out)
    else:
        cc = importlib.import_module("connected_components")
        edges = cc.random_graph(vertices=inputs, edges=inputs * 3 // 2, seed=37)
        cc.components(env, ListSource(edges, splits=2), os.path.join(directory, "out"))
    return env.job_graph(f"loops-{job}")


def run_once(job: str, inputs: int, session: Any = None) -> dict[str, Any]:
    from epochal.state.storage import CheckpointStorage

    directory = tempfile.mkdtemp(prefix="epochal-loops-")
    try:
        graph = _build(job, inputs, directory, session)
        started_wall, started_mono = time.time(), time.monotonic()
        if session is None:
            from epochal.cluster.inprocess import InProcessExecutor

            t0 = time.perf_counter()
            result = InProcessExecutor().execute(graph)
            seconds = time.perf_counter() - t0
            began = started_wall
        else:
            from epochal.cluster.spark import SparkExecutor

            executor = SparkExecutor(session)
            result = executor.execute(graph)
            events = dict(executor.timeline)
            seconds = events["finished"] - events["running"]
            began = started_wall + (events["running"] - started_mono)  # the workers running
        storage = CheckpointStorage(os.path.join(directory, "ckpt"), create=False)
        checkpoints = []
        for cid in storage.complete_checkpoints():
            m = storage.load_manifest(cid)
            checkpoints.append({"id": cid, "final": m.is_final, "duration_ms": m.duration_ms, "size": m.size,
                                "completed_s": m.created_at - began})
        records = result.operator("halve").records_in if job != "components" else result.operator(
            "propagate").records_in
        return {"job": job, "inputs": inputs, "seconds": seconds, "records": records,
                "checkpoints": checkpoints, "restarts": result.restarts}
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def _row(run: dict[str, Any]) -> dict[str, Any]:
    periodic = [c for c in run["checkpoints"] if not c["final"]]
    durations = [c["duration_ms"] for c in periodic]
    first = min((c["completed_s"] for c in run["checkpoints"]), default=None)
    return {
        "job": run["job"], "host": run["host"], "seconds": run["seconds"], "records": run["records"],
        "periodic": len(periodic), "all": len(run["checkpoints"]),
        "p50_ms": statistics.median(durations) if durations else None,
        "p99_ms": _percentile(durations, 99) if durations else None,
        "max_ms": max(durations, default=None),
        "first_commit_s": first,
        "size_kb_median": statistics.median(c["size"] for c in periodic) / 1024 if periodic else None,
    }


@benchmark("loops", "Loops that checkpoint while busy: halving loop, connected components, loop-free baseline")
def run(quick: bool) -> dict[str, Any]:
    examples = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples")
    if examples not in sys.path:
        sys.path.insert(0, examples)
    sizes = {"in-process": {"halving": 80_000, "components": 20_000, "loop-free": 80_000},
             "spark": {"halving": 6_000, "components": 10_000, "loop-free": 6_000}}
    if quick:
        sizes = {"in-process": {"halving": 4_000, "components": 2_000, "loop-free": 4_000}}
    runs = []
    for host, per_job in sizes.items():
        session = None
        if host == "spark":
            from pyspark import cloudpickle

            from epochal.cluster.spark import create_session

            w.ship()
            cloudpickle.register_pickle_by_value(sys.modules[__name__])  # type: ignore[no-untyped-call]
            cloudpickle.register_pickle_by_value(importlib.import_module("connected_components"))  # type: ignore[no-untyped-call]
            session = create_session("local[2]")
        for job in JOBS:
            outcome = run_once(job, per_job[job], session)
            outcome["host"] = host if host == "in-process" else "spark local[2]"
            runs.append(outcome)
    rows = [_row(r) for r in runs]
    result = {"interval": INTERVAL, "spark_udf_us": SPARK_UDF_S * 1e6, "sizes": sizes, "rows": rows, "runs": runs}
    _plot(result)
    result["summary"] = _summary(result)
    return result


def _fmt(value: float | None, digits: int = 0) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def _summary(result: dict[str, Any]) -> str:
    lines = [
        f"Parallelism 2, checkpoints every {result['interval']:g} s. Inputs per job and host: "
        + "; ".join(f"{host}: " + ", ".join(f"{j} {n:,}" for j, n in per.items())
                    for host, per in result["sizes"].items())
        + f" (components: vertices, with 1.5 edges each). On Spark `halve` takes {result['spark_udf_us']:.0f} µs "
        "a record, in-process none. Records: what went through `halve` (`propagate` for components). "
        "First commit: seconds from the run's start to its first complete checkpoint.",
        "",
        "| Host | Job | Run s | Records | Checkpoints (periodic / all) | Duration p50 (ms) | p99 (ms) | max (ms) | "
        "First commit (s) | Size median (KB) |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in result["rows"]:
        lines.append(
            f"| {r['host']} | {r['job']} | {_fmt(r['seconds'], 1)} | {_fmt(r['records'])} | "
            f"{r['periodic']} / {r['all']} | {_fmt(r['p50_ms'])} | {_fmt(r['p99_ms'])} | {_fmt(r['max_ms'])} | "
            f"{_fmt(r['first_commit_s'], 2)} | {_fmt(r['size_kb_median'], 1)} |"
        )
    by = {(r["host"], r["job"]): r for r in result["rows"]}
    for host in ("in-process", "spark local[2]"):
        loop, free = by.get((host, "halving")), by.get((host, "loop-free"))
        if loop and free and loop["p50_ms"] and free["p50_ms"]:
            lines += ["", (
                f"{host}: a checkpoint of the busy halving loop took {loop['p50_ms']:,.0f} ms (p50) and "
                f"{_fmt(loop['p99_ms'])} ms (p99), {loop['p50_ms'] / free['p50_ms']:.1f}x the loop-free "
                f"job's {free['p50_ms']:,.0f} ms; its first commit came {_fmt(loop['first_commit_s'], 2)} s "
                f"after the start."
            )]
    lines += ["", "![checkpoint durations of busy loops](img/loops.png)"]
    return "\n".join(lines)


def _plot(result: dict[str, Any]) -> None:
    plt = pyplot()
    if plt is None:
        return
    hosts = sorted({r["host"] for r in result["runs"]})
    fig, axes = plt.subplots(1, len(hosts), figsize=(5 * len(hosts), 3.8), squeeze=False)
    for ax, host in zip(axes[0], hosts, strict=True):
        for run in (r for r in result["runs"] if r["host"] == host):
            periodic = [c for c in run["checkpoints"] if not c["final"]]
            ax.plot([c["completed_s"] for c in periodic], [c["duration_ms"] for c in periodic], ".", label=run["job"])
        ax.set_title(host)
        ax.set_xlabel("completed at (s from the start)")
        ax.set_ylabel("checkpoint duration (ms)")
        ax.legend()
    fig.tight_layout()
    save_figure(fig, "loops.png")
