"""Recovery from a killed worker, and what chained backups cost (issue 18).

`migration`'s job: a keyed running count on Spark (`local[2]`, parallelism 2), fed open-loop at
`RATE` records/s over 1,024 hot keys, beside cold keys that make the keyed state `SIZE_MB`; 1 s
checkpoints. At `KILL_AT` seconds one worker is SIGKILLed after a checkpoint, three ways:

- *peer backups*: `StateConfig(backup_replicas=1)`; the worker's process is killed, its Spark
  task's supervisor starts a new one, the job master restores the dead worker's key groups on
  its peer from the peer's copies (the survivor reads its own copies too), then moves them back;
- *new process, from storage*: no backups; the same kill; every worker restores from storage;
- *stage relaunch*: no backups; the whole Spark task (the supervisor) is killed, as when an
  executor is lost: Spark fails the barrier stage and the job master submits a new one.

Latency is sink time − the record's due time, worst per 250 ms (`elasticity`'s measuring sink,
which is not transactional: what is replayed is measured again). The figures: the longest
stretch without output after the kill, the worst latency in the 4 s after it, and the job
master's recovery time (failure noticed → every worker running again).

Backup cost: the same job unpaced, with and without backups, alternated (`COST_RUNS` each),
records/s read over `COST_S` seconds after the cold keys loaded.
"""

from __future__ import annotations

import os
import shutil
import signal
import sys
import tempfile
import time
from typing import Any

from . import elasticity, migration, soak
from .runner import benchmark, pyplot, save_figure

RATE = 200_000.0
SIZE_MB = 100
KILL_AT = 10.0
RUN_S = 20.0
COST_S = 12.0
COST_RUNS = 2
SCENARIOS = (("peer backups", 1, False), ("new process, from storage", 0, False), ("stage relaunch", 0, True))


def _graph(spark: Any, directory: str, source: Any, sink: Any, replicas: int, name: str) -> Any:
    from epochal import CheckpointConfig, StateConfig, StreamEnvironment

    env = StreamEnvironment(parallelism=2, spark=spark, batch_size=256,
                            checkpoint=CheckpointConfig(interval=1.0, directory=os.path.join(directory, "ckpt"),
                                                        retain=2),
                            state=StateConfig(backup_replicas=replicas))
    hot = env.from_source(source).map(migration._hot)
    cold = env.from_source(migration.ColdKeys(SIZE_MB * 1024 * 1024 // migration.BLOB))
    hot.union(cold).key_by(migration._key).reduce(migration._count).filter(migration._measured).sink_to(sink)
    return env.job_graph(name)


def _run(spark: Any, graph: Any, until: float, during: Any = None) -> Any:
    """Run `graph` on Spark until wall-clock `until`, calling `during(executor)` once its
    workers said hello."""
    executor, control, thread, _ = soak._start(spark, graph)
    if during is not None:
        during(executor)
    time.sleep(max(0.0, until - time.time()))
    control.request_cancel()
    thread.join(timeout=180)
    return executor


def kill_once(spark: Any, directory: str, replicas: int, whole_task: bool) -> dict[str, Any]:
    lat = os.path.join(directory, "lat")
    os.makedirs(lat)
    start = time.time() + 10.0 + SIZE_MB / 20  # the input is due from here: the cold keys load meanwhile
    source = elasticity.PacedSplit(int(RATE * (RUN_S + 30)), RATE, start)
    graph = _graph(spark, directory, source, elasticity.LatencySink(lat, start, RATE), replicas, "recovery")
    killed: dict[str, float] = {}

    def kill(executor: Any) -> None:
        time.sleep(max(0.0, start + KILL_AT - time.time()))
        victims = executor.supervisor_pids if whole_task else executor.worker_pids
        os.kill(victims[1], signal.SIGKILL)
        killed["at"] = time.time() - start

    executor = _run(spark, graph, start + RUN_S, kill)
    rows = [r[:3] for r in elasticity.read_buckets(lat) if 0 <= r[0] < RUN_S]
    steady = [r[2] for r in rows if 2.0 <= r[0] < KILL_AT]
    return {
        "replicas": replicas, "whole_task": whole_task, "killed_at": killed.get("at"), "buckets": rows,
        "steady_max_s": max(steady, default=None), **elasticity.after_change(rows, killed.get("at", KILL_AT)),
        "recovery_s": executor.recovery_seconds, "local_restore_bytes": executor.local_restore_bytes,
        "launches": [e for e, _ in executor.timeline].count("submitted"),
    }


def throughput_once(spark: Any, directory: str, replicas: int) -> float:
    position = os.path.join(directory, "pos")
    source = elasticity.PacedSplit(10**10, None, time.time(), position)
    lat = os.path.join(directory, "lat")
    os.makedirs(lat)
    graph = _graph(spark, directory, source, elasticity.LatencySink(lat, time.time(), 1.0), replicas, "backup-cost")
    measured: dict[str, float] = {}

    def measure(_: Any) -> None:
        time.sleep(10.0 + SIZE_MB / 20)  # start-up and the cold keys' load
        first, t0 = source.read_position() or 0, time.monotonic()
        time.sleep(COST_S)
        measured["rate"] = ((source.read_position() or 0) - first) / (time.monotonic() - t0)

    _run(spark, graph, time.time(), measure)
    return measured["rate"]


@benchmark("recovery", "Recovery from a killed worker: peer backups, storage, stage relaunch; backups' cost")
def run(quick: bool) -> dict[str, Any]:
    from pyspark import cloudpickle

    from epochal.cluster.spark import create_session

    for module in (sys.modules[__name__], elasticity, soak, migration):
        cloudpickle.register_pickle_by_value(module)  # type: ignore[no-untyped-call]
    spark = create_session("local[2]")
    directory = tempfile.mkdtemp(prefix="epochal-recovery-")
    kills, cost = [], {"with": [], "without": []}  # type: ignore[var-annotated]
    try:
        for i, (name, replicas, whole) in enumerate(SCENARIOS[:1] if quick else SCENARIOS):
            where = os.path.join(directory, f"kill{i}")
            os.makedirs(where)
            kills.append({"scenario": name, **kill_once(spark, where, replicas, whole)})
        for i in range(1 if quick else COST_RUNS):
            for replicas, label in ((0, "without"), (1, "with")):
                where = os.path.join(directory, f"cost{i}-{replicas}")
                os.makedirs(where)
                cost[label].append(throughput_once(spark, where, replicas))
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    out = {"rate": RATE, "size_mb": SIZE_MB, "kill_at": KILL_AT, "bucket_s": elasticity.BUCKET,
           "kills": kills, "cost": cost}
    _plot(out)
    out["summary"] = _summary(out)
    return out


def _summary(result: dict[str, Any]) -> str:
    def ms(v: float | None) -> str:
        return "-" if v is None else f"{v * 1000:,.0f}"

    lines = [
        f"A keyed running count on `local[2]` at parallelism 2, paced open-loop at {result['rate']:,.0f} records/s "
        f"over {soak.KEYS:,} hot keys, beside cold keys that make {result['size_mb']} MB of keyed state; 1 s "
        f"checkpoints. Worker 1 is SIGKILLed at {result['kill_at']:.0f} s. Gap: the longest stretch without output "
        "in the 4 s after the kill; worst: the worst latency (sink time − due time) in those 4 s; recovery: the job "
        "master's failure noticed → every worker running; read locally: what the restore read from backups' copies.",
        "",
        "| Recovery | Steady worst (ms) | Gap (ms) | Worst after (ms) | Recovery (ms) | Read locally (MB) | "
        "Stages |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for k in result["kills"]:
        local = k["local_restore_bytes"][-1] / 2**20 if k["local_restore_bytes"] else 0.0
        recovery = k["recovery_s"][0] if k["recovery_s"] else None
        lines.append(
            f"| {k['scenario']} | {ms(k['steady_max_s'])} | {ms(k['longest_gap_s'])} | {ms(k['worst_latency_s'])} | "
            f"{ms(recovery)} | {local:,.0f} | {k['launches']} |"
        )
    cost = result["cost"]
    if cost["with"] and cost["without"]:
        with_, without = max(cost["with"]), max(cost["without"])
        lines += [
            "",
            f"Backups' cost, the same job unpaced (best of {len(cost['with'])}, alternated): "
            f"{without:,.0f} records/s without, {with_:,.0f} with `backup_replicas=1` "
            f"({(with_ / without - 1) * 100:+.1f} %).",
        ]
    lines += ["", "![latency through a worker's kill](img/recovery.png)"]
    return "\n".join(lines)


def _plot(result: dict[str, Any]) -> None:
    plt = pyplot()
    if plt is None:
        return
    fig, ax = plt.subplots(figsize=(8, 3.2))
    for k in result["kills"]:
        pts = [(t, worst) for t, n, worst in k["buckets"] if n]
        ax.plot([p[0] for p in pts], [p[1] * 1000 for p in pts], lw=1.0, label=k["scenario"])
    ax.axvline(result["kill_at"], color="grey", ls=":", lw=0.8)
    ax.set_yscale("log")
    ax.set_ylabel("worst latency per 250 ms (ms)")
    ax.set_xlabel("seconds")
    ax.legend(fontsize=7)
    fig.tight_layout()
    save_figure(fig, "recovery.png")
