"""Recovery from a killed worker, and what chained backups cost (issue 18).

`migration`'s job: a keyed running count on Spark (`local[2]`, parallelism 2), fed open-loop at
`RATE` records/s over 1,024 hot keys, beside cold keys that make the keyed state `SIZE_MB`; 1 s
checkpoints. At `KILL_AT` seconds worker 1 is SIGKILLed, three ways:

- *peer backups*: `StateConfig(backup_replicas=1)`; the worker's process is killed, its Spark
  task's supervisor starts a new one, the job master restores the dead worker's key groups on
  its peer from the peer's copies (the survivor reads its own copies too), then moves them back;
- *new process, from storage*: no backups; the same kill; every worker restores from storage;
- *stage relaunch*: no backups; the whole Spark task (the supervisor) is killed, as when an
  executor is lost: Spark fails the barrier stage and the job master submits a new one;
- *survivors run on* (issue 37): `RecoveryConfig(survivors=True)`, no backups; the same kill of
  the worker's process; only its tasks restore (from storage, in its new process) while worker
  0's run on, replaying to it what they sent since the checkpoint and dropping what it sends
  again (`runtime.master.survivors`).

Issue 37's figures for the last: the records the survivor's sink wrote from the kill until the
lost groups were back, against the same in the rollback scenarios; the longest gap of the groups
that were *not* lost (target: none beyond the steady worst); the lost groups back within 1 s.

`measuring_sink` measures latency (sink time − due time) and key groups' output times; it is not
transactional, so what is replayed is measured again. Issue 18's target is per key group: the
lost groups (those worker 1 wrote before the kill) produce output again within 1 s. So the
figures: per lost group, the time from the kill to its first output; the longest stretch any
group went without output and the worst latency in the `AFTER_KILL` seconds after the kill (the
move back included); the job master's recovery time (failure noticed → every worker running).

Backups' cost: the same job unpaced, in the same set-up (parallelism 2, supervised workers) with
`backup_replicas` 0 and 1, in `PAIRS` pairs whose order alternates (0-1, 1-0, ...); records/s read
over `COST_S` seconds after the cold keys loaded; the figure is the median of the pairs' ratios.
"""

from __future__ import annotations

import math
import os
import shutil
import signal
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from typing import Any

from . import elasticity, measuring_sink, migration, soak
from .runner import benchmark, pyplot, save_figure

RATE = 200_000.0
SIZE_MB = 100
KILL_AT = 10.0
AFTER_KILL = 8.0
RUN_S = KILL_AT + AFTER_KILL + 2.0
COST_S = 20.0
PAIRS = 5
TARGET_S = 1.0  # issue 18: the lost key groups produce output again within 1 s
COST_TARGET = 0.05


@dataclass(frozen=True, slots=True)
class Scenario:
    name: str
    replicas: int
    whole_task: bool  # kill the Spark task (its supervisor), not only the worker's process
    survivors: bool = False  # RecoveryConfig(survivors=True): only the lost worker's tasks restore


SCENARIOS = (Scenario("peer backups", 1, False), Scenario("new process, from storage", 0, False),
             Scenario("stage relaunch", 0, True), Scenario("every task rolls back (unmerged)", 0, False, False),
             Scenario("survivors run on (unmerged)", 0, False, True))
UNMERGED = SCENARIOS[3:]  # run on the job without the union (`_unmerged`)


def _unmerged(env: Any, hot: Any, sink: Any, size_mb: float) -> None:
    """`migration`'s job with its two sources not merged by a union: the hot keys' counts and the
    cold keys' in two keyed operators. A union's output interleaves its inputs in an order no
    restore repeats, so survivors cannot drop what it sends again (`runtime.master.survivors`);
    straight from their sources, they can."""
    cold = env.from_source(migration.ColdKeys(int(size_mb * 1024 * 1024) // migration.BLOB))
    cold.key_by(migration._key).reduce(migration._count, name="cold").filter(migration._measured).sink_to(sink)
    (env.from_source(hot).map(migration._hot).key_by(migration._key).reduce(migration._count).filter(
        migration._measured).sink_to(sink))


def _graph(spark: Any, directory: str, source: Any, sink: Any, replicas: int, name: str,
           survivors: bool = False, unmerged: bool = False) -> Any:
    from epochal import RecoveryConfig

    env = elasticity.environment(spark, elasticity.PARALLEL, os.path.join(directory, "ckpt"),
                                 backup_replicas=replicas, compact_every=migration.COMPACT_EVERY)
    env.recovery = RecoveryConfig(survivors=survivors)
    (_unmerged if unmerged else migration.build)(env, source, sink, SIZE_MB)
    return env.job_graph(name)


def _run(spark: Any, graph: Any, until: float, during: Any = None) -> tuple[Any, float]:
    """Run `graph` on Spark until wall-clock `until`, calling `during(executor)` once its
    workers said hello; the executor, and the cores the machine's other processes used meanwhile."""
    with elasticity.Neighbours() as neighbours:
        executor, control, thread, _ = soak._start(spark, graph)
        if during is not None:
            during(executor)
        time.sleep(max(0.0, until - time.time()))
        control.request_cancel()
        thread.join(timeout=300)
    return executor, neighbours.cores


def kill_once(spark: Any, directory: str, scenario: Scenario) -> dict[str, Any]:
    lat = os.path.join(directory, "lat")
    os.makedirs(lat)
    start = time.time() + 10.0 + SIZE_MB / 20  # the input is due from here: the cold keys load meanwhile
    source = elasticity.PacedSplit(int(RATE * 3600), RATE, start)
    graph = _graph(spark, directory, source, measuring_sink.MeasuringSink(lat, start, RATE), scenario.replicas,
                   "recovery", scenario.survivors, scenario in UNMERGED)
    killed: dict[str, float] = {}

    def kill(executor: Any) -> None:
        time.sleep(max(0.0, start + KILL_AT - time.time()))
        victims = executor.supervisor_pids if scenario.whole_task else executor.worker_pids
        os.kill(victims[1], signal.SIGKILL)
        killed["at"] = time.time() - start

    executor, neighbours = _run(spark, graph, start + RUN_S, kill)
    measured = measuring_sink.load(lat, start)
    return {"scenario": scenario.name, "replicas": scenario.replicas, "whole_task": scenario.whole_task,
            "survivors": scenario.survivors, "survivor_recoveries": executor.survivor_recoveries,
            "neighbour_cores": neighbours,
            **kill_figures(measured, killed["at"]),
            "recovery_s": executor.recovery_seconds, "local_restore_bytes": executor.local_restore_bytes,
            "launches": [e for e, _ in executor.timeline].count("submitted")}


def steady_until(at: float) -> float:
    """The end of the steady window before a kill at `at`: the start of the kill's bucket, whose
    worst latency is the kill's (run 2026-11-29: a kill 0.15 ms into its bucket made a steady
    worst of 1,123 ms)."""
    return math.floor(at / measuring_sink.BUCKET) * measuring_sink.BUCKET


def kill_figures(measured: measuring_sink.Measured, at: float) -> dict[str, Any]:
    """Figures of a kill at `at` seconds: per lost group (worker 1's before), the seconds to its
    first output after the kill; the worst gap and latency after it; and the steady ones before."""
    lost = sorted(measured.groups_of(1, elasticity.STEADY_FROM, at))
    silent = measured.output_after(at)
    known = [s for g in lost if (s := silent.get(g)) is not None]
    until = at + AFTER_KILL
    gaps = measured.gaps(at, until)
    steady_gaps = measured.gaps(elasticity.STEADY_FROM, at, ended=True)
    back = max(known) if known and len(known) == len(lost) else AFTER_KILL
    kept = [gap for group, gap in gaps.items() if group not in set(lost)]
    return {
        # issue 37: what the survivor (worker 0's sink) wrote until the lost groups were back, and
        # the longest gap of the groups that were not lost
        "survivor_records_in_recovery": measured.records(0, steady_until(at), at + back),
        "survivor_records_steady_per_s": measured.records(0, elasticity.STEADY_FROM, steady_until(at))
        / max(1e-9, steady_until(at) - elasticity.STEADY_FROM),
        "recovery_window_s": back + (at - steady_until(at)),
        "kept_worst_gap_s": max(kept, default=None),
        "killed_at": at, "lost_groups": len(lost), "lost_never": len(lost) - len(known),
        "lost_silent_s": {g: None if silent.get(g) is None else round(silent[g] or 0.0, 5) for g in lost},
        "lost_worst_silent_s": max(known) if known and len(known) == len(lost) else None,
        "lost_median_silent_s": statistics.median(known) if known else None,
        "all_worst_silent_s": measuring_sink.worst(silent.values()),
        "worst_gap_s": max(gaps.values(), default=None),
        "worst_latency_s": measured.worst_latency(at, until),
        "steady_worst_latency_s": measured.worst_latency(elasticity.STEADY_FROM, steady_until(at)),
        "steady_worst_gap_s": max(steady_gaps.values(), default=None),
        "latency": [(t, n, round(w, 5)) for t, n, w, _ in measured.latency if 0 <= t < RUN_S],
        "gaps": [(t, round(g, 5)) for t, g in measured.gap_series() if 0 <= t < RUN_S],
    }


def throughput_once(spark: Any, directory: str, replicas: int) -> tuple[float, float]:
    position = os.path.join(directory, "pos")
    source = elasticity.PacedSplit(10**10, None, time.time(), position)
    lat = os.path.join(directory, "lat")
    os.makedirs(lat)
    graph = _graph(spark, directory, source, measuring_sink.MeasuringSink(lat, time.time(), 1.0), replicas,
                   "backup-cost")
    measured: dict[str, float] = {}

    def measure(_: Any) -> None:
        time.sleep(10.0 + SIZE_MB / 20)  # start-up and the cold keys' load
        first, t0 = source.read_position() or 0, time.monotonic()
        time.sleep(COST_S)
        measured["rate"] = ((source.read_position() or 0) - first) / (time.monotonic() - t0)

    _, neighbours = _run(spark, graph, time.time(), measure)
    return measured["rate"], neighbours


def backup_cost(spark: Any, directory: str, pairs: int) -> list[dict[str, float]]:
    """`pairs` pairs of unpaced runs without and with backups, the order alternating."""
    out = []
    for i in range(pairs):
        rates, neighbours = {}, {}
        for replicas in (0, 1) if i % 2 == 0 else (1, 0):
            where = os.path.join(directory, f"cost{i}-{replicas}")
            os.makedirs(where)
            rates[replicas], neighbours[replicas] = throughput_once(spark, where, replicas)
        out.append({"without": rates[0], "with": rates[1], "ratio": rates[1] / rates[0],
                    "neighbour_cores": max(neighbours.values())})
    return out


@benchmark("recovery", "Recovery from a killed worker: peer backups, storage, stage relaunch; backups' cost")
def run(quick: bool) -> dict[str, Any]:
    from epochal.cluster.spark import create_session

    elasticity.ship(sys.modules[__name__], migration)
    spark = create_session("local[2]")
    directory = tempfile.mkdtemp(prefix="epochal-recovery-")
    kills = []
    try:
        for i, scenario in enumerate(SCENARIOS[:1] if quick else SCENARIOS):
            where = os.path.join(directory, f"kill{i}")
            os.makedirs(where)
            kills.append(kill_once(spark, where, scenario))
        cost = backup_cost(spark, directory, 1 if quick else PAIRS)
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    out = {"rate": RATE, "size_mb": SIZE_MB, "kill_at": KILL_AT, "after_kill_s": AFTER_KILL,
           "bucket_s": elasticity.BUCKET, "kills": kills, "cost": cost}
    _plot(out)
    out["summary"] = _summary(out)
    return out


def why_peer_recovery_costs(result: dict[str, Any]) -> list[str]:
    """Said when recovery from peers' copies is worse after the kill than a restore from storage."""
    by = {k["scenario"]: k for k in result["kills"]}
    peer, storage = by.get("peer backups"), by.get("new process, from storage")
    if peer is None or storage is None or (peer["worst_latency_s"] or 0) <= (storage["worst_latency_s"] or 0):
        return []
    return ["", "With peer backups the lost groups came back about as soon as from storage, but the latency "
            "after the kill was worse: the survivor restores every key group (its own from its copies, the lost "
            "ones from the copies it holds), replays, writes its first checkpoint after the restore in full and "
            "reads ahead for the move back, alone, until the groups have moved back to the new process; "
            "restored from storage, each process takes its own half at once. On a local disk whose files are in "
            "the page cache, reading storage is as fast as reading the copies; they could pay off only where storage "
            "is slower to read."]


def _survivor_share(k: dict[str, Any]) -> str:
    """What the survivor wrote from the kill until the lost groups were back, and its share of what it
    writes in that long steadily."""
    records, steady = k.get("survivor_records_in_recovery"), k.get("survivor_records_steady_per_s")
    if records is None or not steady:
        return "-"
    return f"{records:,} ({100 * records / (steady * k['recovery_window_s']):.0f} %)"


def _survivors_lines(result: dict[str, Any]) -> list[str]:
    """Issue 37's targets, read from the survivors' run."""
    k = next((k for k in result["kills"] if k.get("survivors")), None)
    if k is None:
        return []
    ran_on = bool(k["survivor_recoveries"])
    back, kept, steady = k["lost_worst_silent_s"], k.get("kept_worst_gap_s"), k["steady_worst_gap_s"]
    return ["", (
        "Survivors without a rollback (issue 37): "
        + ("only the lost worker's tasks restored" if ran_on else "**every task rolled back** (the plan refused)")
        + f"; the survivor wrote {_survivor_share(k)} of its steady output while the lost groups recovered; "
        f"the groups that were not lost went at most {elasticity.ms(kept)} ms without output against a steady "
        f"worst of {elasticity.ms(steady)} ms (target: none beyond it, "
        f"{_verdict(kept is not None and steady is not None and kept <= steady)}); the lost groups were back "
        f"after {elasticity.ms(back)} ms (target ≤ 1 s, {_verdict(back is not None and back <= TARGET_S)})."
    )]


def neighbours_note(pair: dict[str, Any]) -> str:
    busy = pair.get("neighbour_cores")
    return "" if busy is None or busy < 0.1 else f" ({busy:.1f} cores busy elsewhere)"


def _verdict(met: bool) -> str:
    return "met" if met else "missed"


def _summary(result: dict[str, Any]) -> str:
    ms = elasticity.ms
    lines = [
        f"A keyed running count on `local[2]` at parallelism 2, paced open-loop at {result['rate']:,.0f} records/s "
        f"over {soak.KEYS:,} hot keys, beside cold keys that make {result['size_mb']} MB of keyed state; 1 s "
        "checkpoints, incremental, their chains not compacted (as in `migration`). Worker 1 is SIGKILLed at "
        f"{result['kill_at']:.0f} s. Lost groups: those worker 1 wrote "
        "before the kill; silent: from the kill to a group's first output after it (median and worst of the "
        f"lost groups); group gap and worst latency: in the {result['after_kill_s']:.0f} s after the kill (the "
        "groups' move back to the new process included); recovery: the job master's failure noticed → every "
        "worker running; read locally: what the restore read from backups' copies.",
        "",
        "| Recovery | Lost groups | Silent, median (ms) | Silent, worst (ms) | Steady worst group gap (ms) | "
        "Worst group gap (ms) | Kept groups' worst gap (ms) | Survivor's records in recovery (% of steady) | "
        "Steady worst latency (ms) | Worst latency after (ms) | Recovery (ms) | Read locally (MB) | Stages |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for k in result["kills"]:
        local = k["local_restore_bytes"][-1] / 2**20 if k["local_restore_bytes"] else 0.0
        recovery = k["recovery_s"][0] if k["recovery_s"] else None
        lines.append(
            f"| {k['scenario']} | {k['lost_groups']} | {ms(k['lost_median_silent_s'])} | "
            f"{ms(k['lost_worst_silent_s'])} | {ms(k['steady_worst_gap_s'])} | {ms(k['worst_gap_s'])} | "
            f"{ms(k.get('kept_worst_gap_s'))} | {_survivor_share(k)} | "
            f"{ms(k['steady_worst_latency_s'])} | {ms(k['worst_latency_s'])} | {ms(recovery)} | {local:,.0f} | "
            f"{k['launches']} |"
        )
    lines += _survivors_lines(result)
    peer = next((k for k in result["kills"] if k["replicas"]), None)
    if peer is not None and peer["lost_worst_silent_s"] is not None:
        lines += ["", f"Issue 18's target, the lost key groups produce output again within 1 s at "
                      f"{result['size_mb']} MB with peer backups: the last of them after "
                      f"{ms(peer['lost_worst_silent_s'])} ms ({_verdict(peer['lost_worst_silent_s'] <= TARGET_S)})."]
    lines += why_peer_recovery_costs(result)
    cost = result["cost"]
    if cost:
        ratio = statistics.median(p["ratio"] for p in cost)
        pairs = ", ".join(f"{p['without']:,.0f} → {p['with']:,.0f}" + neighbours_note(p) for p in cost)
        lines += [
            "",
            f"Backups' cost, the same job unpaced, {len(cost)} pairs without → with `backup_replicas=1`, order "
            f"alternating (records/s): {pairs}; median ratio {ratio:.3f}, a cost of {(1 - ratio) * 100:.1f} % "
            f"(target ≤ 5 %: {_verdict(1 - ratio <= COST_TARGET)}).",
        ]
    lines += ["", *elasticity.neighbours_line([*result["kills"], *cost]),
              "![latency and key groups' gaps through a worker's kill](img/recovery.png)"]
    return "\n".join(lines)


def _plot(result: dict[str, Any]) -> None:
    plt = pyplot()
    if plt is None:
        return
    fig, axes = plt.subplots(2, 1, figsize=(8, 5.5), sharex=True)
    for k in result["kills"]:
        line = axes[0].plot([t for t, n, _ in k["latency"] if n], [w * 1000 for _, n, w in k["latency"] if n],
                            lw=1.0, label=k["scenario"])
        axes[1].plot([t for t, _ in k["gaps"]], [g * 1000 for _, g in k["gaps"]], lw=1.0,
                     color=line[0].get_color())
    for ax in axes:
        ax.axvline(result["kill_at"], color="grey", ls=":", lw=0.8)
        ax.set_yscale("log")
    axes[1].axhline(TARGET_S * 1000, color="red", lw=0.6, ls="--")
    axes[0].set_ylabel("worst latency\nper 250 ms (ms)")
    axes[1].set_ylabel("longest key-group\ngap (ms)")
    axes[1].set_xlabel("seconds (dotted: the kill)")
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    save_figure(fig, "recovery.png")
