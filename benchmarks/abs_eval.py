"""The ABS paper's evaluation (Carbone et al., §7, Fig. 5-7) on Epochal.

Topology (Fig. 5): six operators, three full shuffles, per-key aggregates and source offsets as
state, parallelism = workers:

    source (generator, offsets) -> map -key_by-> reduce (sum per key) -key_by-> reduce (sum per
    key) -key_by-> count -> sink

The source generates N records `(key, value)`, record i the same in every run, spread evenly
over the source subtasks (one split each). Snapshot modes: none (the baseline), ABS
(`CheckpointConfig(mode="aligned")`) and synchronous (Naiad's: sources halt after the barrier
until the checkpoint completes; tasks write state inline).

- Fig. 6: run time against the snapshot interval (0.5, 1, 2, 5 s) for ABS and synchronous, as a
  ratio to the baseline runs just before and after it (see `fig6`); the median over rounds.
- Fig. 7: throughput against parallelism (1, 2, 4 workers), baseline and ABS at 3 s (the paper's
  interval for this figure).
- Alignment time per task (p50, p99) under full load, checkpoint duration and size, read from
  the checkpoint manifests of the ABS runs at 1 s.
"""

from __future__ import annotations

import os
import shutil
import statistics
import tempfile
from typing import Any

from .runner import benchmark, pyplot, save_figure, timed_execute
from .spark_subprocess import run_on_spark

INTERVALS = (0.5, 1.0, 2.0, 5.0)
FIG7_INTERVAL = 3.0
KEYS = 10_000
TARGET_OVERHEAD = 0.03  # the bound for ABS at a 1 s interval


def abs_env(
    records: int, parallelism: int, mode: str, interval: float | None, directory: str | None,
    session: Any = None, metrics_interval: float | None = 1.0,
) -> Any:
    """The Fig. 5 program; `mode` is "none", "aligned" (ABS) or "synchronous"."""
    from epochal import CheckpointConfig, StreamEnvironment

    from . import workloads as w

    checkpoint = None
    if mode != "none":
        checkpoint = CheckpointConfig(interval=interval, directory=directory, mode=mode, retain=1_000_000)
    env = StreamEnvironment(
        parallelism=parallelism, checkpoint=checkpoint, executor="spark" if session else "inprocess",
        spark=session, metrics_interval=metrics_interval,
    )
    (env.from_source(w.GeneratorSource(records, parallelism, KEYS), name="source")
        .map(w.remap, name="map")
        .key_by(w.first).reduce(w.add_values, name="sum_by_key")
        .key_by(w.rekey_a).reduce(w.add_values, name="sum_by_group")
        .key_by(w.rekey_b).count(name="count")
        .sink_to(w.NullSink(), name="sink"))
    return env


def run_once(
    records: int, parallelism: int, mode: str, interval: float | None = None, session: Any = None
) -> dict[str, Any]:
    """One run: seconds (in-process: execute(); Spark: workers running → finished), checkpoints."""
    directory = tempfile.mkdtemp(prefix="epochal-abs-") if mode != "none" else None
    try:
        job = abs_env(records, parallelism, mode, interval, directory, session).job_graph(f"abs-{mode}")
        result, seconds = timed_execute(job, session)
        counted = result.operator("count").records_in
        if counted != records:
            raise RuntimeError(f"the count saw {counted} records of {records}")
        out: dict[str, Any] = {
            "mode": mode, "interval": interval, "parallelism": parallelism, "records": records,
            "seconds": seconds, "records_per_s": records / seconds, "checkpoints": [],
        }
        if directory is not None:
            out["checkpoints"] = _manifest_stats(directory)
        return out
    finally:
        if directory is not None:
            shutil.rmtree(directory, ignore_errors=True)


def periodic_checkpoints(run: dict[str, Any]) -> list[dict[str, Any]]:
    """A run's checkpoints but the final one (which a bounded job takes at its end)."""
    return [c for c in run["checkpoints"] if not c["final"]]


def run_sizes(quick: bool) -> tuple[int, int]:
    """Records a run in-process and on Spark: about 20 s on either host (Spark's two workers
    run about twice as fast)."""
    records = 200_000 if quick else int(os.environ.get("EPOCHAL_ABS_RECORDS", 8_000_000))
    return records, records if quick else 2 * records


def _manifest_stats(directory: str) -> list[dict[str, Any]]:
    from epochal.state.storage import CheckpointStorage

    storage = CheckpointStorage(directory, create=False)
    out = []
    for cid in storage.complete_checkpoints():
        m = storage.load_manifest(cid)
        out.append({
            "id": cid,
            "final": m.is_final,
            "duration_ms": m.duration_ms,
            "size": m.size,
            "written": m.written_size(),
            # the source vertex (v0) does not align: its "alignment" is 0 by definition
            "alignment_ms": [t.alignment_ms for t in m.tasks if not t.task.startswith("v0[")],
            "sync_ms": [t.sync_ms for t in m.tasks],
        })
    return out


def _percentile(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))]


def fig6(records: int, parallelism: int, rounds: int, session: Any = None) -> dict[str, Any]:
    """ABS and synchronous at every interval, each pair of runs bracketed by baseline runs.

    This shared machine slows down in phases that last minutes (one measured phase: +20 % for
    five runs in a row), longer than any single run, so interleaving configurations is not
    enough. Each run's ratio is taken to the mean of the baseline runs just before and just after
    its pair, and the figure is the median of those ratios over the rounds.
    """
    pairs = [[("aligned", i), ("synchronous", i)] for i in INTERVALS]
    runs: dict[str, list[dict[str, Any]]] = {}
    ratios: dict[str, list[float]] = {}
    for r in range(rounds):
        order = pairs if r % 2 == 0 else [list(reversed(p)) for p in reversed(pairs)]
        before = run_once(records, parallelism, "none", None, session)
        runs.setdefault("none@None", []).append(before)
        for pair in order:
            results = [run_once(records, parallelism, mode, interval, session) for mode, interval in pair]
            after = run_once(records, parallelism, "none", None, session)
            runs["none@None"].append(after)
            base = (before["seconds"] + after["seconds"]) / 2
            for (mode, interval), x in zip(pair, results):
                runs.setdefault(f"{mode}@{interval}", []).append(x)
                ratios.setdefault(f"{mode}@{interval}", []).append(x["seconds"] / base)
            before = after
    base = statistics.median(x["seconds"] for x in runs["none@None"])
    table = {}
    for name, xs in runs.items():
        seconds = statistics.median(x["seconds"] for x in xs)
        checkpoints = [c for x in xs for c in periodic_checkpoints(x)]
        table[name] = {
            "mode": xs[0]["mode"], "interval": xs[0]["interval"], "seconds": seconds,
            "runs_seconds": [x["seconds"] for x in xs],
            "ratios": ratios.get(name, [1.0]), "ratio": statistics.median(ratios.get(name, [1.0])),
            "checkpoints_per_run": statistics.mean(len(periodic_checkpoints(x)) for x in xs),
            "duration_ms_p50": _percentile([c["duration_ms"] for c in checkpoints], 50),
            "duration_ms_p99": _percentile([c["duration_ms"] for c in checkpoints], 99),
            "alignment_ms_p50": _percentile([a for c in checkpoints for a in c["alignment_ms"]], 50),
            "alignment_ms_p99": _percentile([a for c in checkpoints for a in c["alignment_ms"]], 99),
            "size_bytes_median": statistics.median([c["size"] for c in checkpoints]) if checkpoints else 0,
            "written_bytes_median": statistics.median([c["written"] for c in checkpoints]) if checkpoints else 0,
        }
    return {"records": records, "parallelism": parallelism, "rounds": rounds, "baseline_s": base, "configs": table}


def fig7(records: int, parallelisms: list[int], session: Any = None) -> dict[str, Any]:
    """Throughput of the baseline and of ABS at 3 s, per parallelism (fixed input)."""
    out = {}
    for p in parallelisms:
        base = run_once(records, p, "none", None, session)
        abs_ = run_once(records, p, "aligned", FIG7_INTERVAL, session)
        out[str(p)] = {"baseline_records_per_s": base["records_per_s"], "abs_records_per_s": abs_["records_per_s"]}
    return {"records": records, "parallelisms": parallelisms, "throughput": out}


def spark_fig6(session: Any, records: int, parallelism: int, rounds: int) -> dict[str, Any]:
    return fig6(records, parallelism, rounds, session)


def spark_fig7(session: Any, records: int, parallelisms: list[int]) -> dict[str, Any]:
    return fig7(records, parallelisms, session)


@benchmark("abs_eval", "ABS paper evaluation: snapshot overhead (Fig. 6) and scalability (Fig. 7)")
def run(quick: bool) -> dict[str, Any]:
    cores = os.cpu_count() or 1
    # ~20 s a run on either host (Spark's two workers run about twice as fast): three rounds of
    # runs bracketed by baselines beat fewer one-minute runs on a machine whose speed drifts for
    # minutes at a time (see fig6), and 20 s amortise the final checkpoint of a bounded job,
    # which the baseline (no checkpointing at all) does not take
    records, spark_records = run_sizes(quick)
    fig7_records = records
    rounds = 1 if quick else int(os.environ.get("EPOCHAL_ABS_ROUNDS", 3))
    hosts: dict[str, Any] = {}
    hosts["inprocess"] = {
        "host": "in-process",
        "fig6": fig6(records, 2, rounds),
        "fig7": fig7(fig7_records, [1, 2, 4]),
    }
    spark2 = f"local[{min(2, cores)}]"
    hosts["spark"] = {
        "host": f"spark {spark2}",
        "fig6": run_on_spark(
            spark2, "benchmarks.abs_eval", "spark_fig6", records=spark_records, parallelism=2, rounds=rounds
        ),
        "fig7": run_on_spark(spark2, "benchmarks.abs_eval", "spark_fig7", records=fig7_records, parallelisms=[1, 2]),
    }
    try:  # 4 workers need 4 slots: local[4] on this 2-core machine (oversubscribed)
        four = run_on_spark("local[4]", "benchmarks.abs_eval", "spark_fig7", records=fig7_records, parallelisms=[4])
        hosts["spark"]["fig7"]["throughput"].update(four["throughput"])
        hosts["spark"]["fig7"]["parallelisms"].append(4)
        hosts["spark"]["fig7"]["four_workers_host"] = "spark local[4]"
    except RuntimeError as exc:
        hosts["spark"]["fig7"]["four_workers_error"] = str(exc)[-500:]
    result: dict[str, Any] = {"records": records, "cores": cores, "hosts": hosts}
    _plot(result)
    result["summary"] = _summary(result)
    return result


def _summary(result: dict[str, Any]) -> str:
    cores = result["cores"]
    parts = [
        "Topology (the paper's Fig. 5): `source (generator; offsets) → map ─key_by→ reduce (sum per "
        "key) ─key_by→ reduce (sum per key) ─key_by→ count → sink`: six operators, three full "
        f"shuffles, {KEYS:,} keys, per-record (Python) path, every operator with parallelism 2 "
        f"(Fig. 6). This machine has {cores} cores: in-process everything shares one core (one "
        "thread); on Spark each worker is a process, plus the driver and the JVM.",
        "",
    ]
    for key in ("inprocess", "spark"):
        host = result["hosts"][key]
        f6 = host["fig6"]
        parts += [
            f"### {host['host']}: run time against snapshot interval (Fig. 6)",
            "",
            f"{f6['records']:,} records, 2 workers, baseline (no checkpoints) {f6['baseline_s']:.1f} s "
            f"= {f6['records'] / f6['baseline_s'] / 1e3:.0f} k records/s (median run). {f6['rounds']} "
            "round(s); each ABS/synchronous pair of runs sits between two baseline runs, and "
            "÷ baseline is the median over rounds of each run against the mean of those two."
            + (f" This table was rerun on its own at {f6['rerun']} (see below)." if "rerun" in f6 else ""),
            "",
            "| mode | interval s | run time s | ÷ baseline | checkpoints | duration p50 / p99 ms | "
            "alignment p50 / p99 ms | size (full) | written (delta) |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for _name, c in f6["configs"].items():
            label = {"none": "none (baseline)", "aligned": "ABS", "synchronous": "synchronous"}[c["mode"]]
            interval = "—" if c["interval"] is None else f"{c['interval']:g}"
            if c["mode"] == "none":
                parts.append(f"| {label} | {interval} | {c['seconds']:.2f} | 1.000 | — | — | — | — | — |")
                continue
            parts.append(
                f"| {label} | {interval} | {c['seconds']:.2f} | {c['ratio']:.3f} | {c['checkpoints_per_run']:.0f} | "
                f"{c['duration_ms_p50']:.0f} / {c['duration_ms_p99']:.0f} | "
                f"{c['alignment_ms_p50']:.1f} / {c['alignment_ms_p99']:.1f} | "
                f"{c['size_bytes_median'] / 1e3:.0f} kB | {c['written_bytes_median'] / 1e3:.0f} kB |"
            )
        abs1 = f6["configs"].get("aligned@1.0")
        if abs1:
            overhead = abs1["ratio"] - 1
            parts += ["", f"ABS at 1 s costs **{overhead:+.1%}** against the baseline "
                      f"({'meets' if overhead <= TARGET_OVERHEAD else 'misses'} the ≤ 3 % target)."]
        f7 = host["fig7"]
        parts += [
            "",
            f"### {host['host']}: throughput against workers (Fig. 7)",
            "",
            f"{f7['records']:,} records, one run per bar; ABS with a {FIG7_INTERVAL:g} s interval."
            + (f" 4 workers ran on `{f7['four_workers_host']}`." if "four_workers_host" in f7 else "")
            + (f" 4 workers failed: {f7['four_workers_error'][:200]}" if "four_workers_error" in f7 else ""),
            "",
            "| workers | baseline k records/s | ABS k records/s |",
            "|---:|---:|---:|",
        ]
        for p, t in sorted(f7["throughput"].items(), key=lambda kv: int(kv[0])):
            parts.append(f"| {p} | {t['baseline_records_per_s'] / 1e3:.0f} | {t['abs_records_per_s'] / 1e3:.0f} |")
        parts.append("")
    parts += [
        f"With {cores} cores, more than {cores} workers cannot scale; in-process, every worker shares "
        "one thread, so Fig. 7 in-process shows the engine's cost of more subtasks, not scaling.",
        "",
        _against_the_paper(result),
        "",
        "![run time against snapshot interval](img/abs_fig6.png)",
        "",
        "![throughput against workers](img/abs_fig7.png)",
        "",
    ]
    return "\n".join(parts)


def _against_the_paper(result: dict[str, Any]) -> str:
    """How the synchronous mode compares with ABS here, and why it may differ from the paper."""
    gaps = []
    for key in ("inprocess", "spark"):
        configs = result["hosts"][key]["fig6"]["configs"]
        for interval in INTERVALS:
            sync, aligned = configs.get(f"synchronous@{interval}"), configs.get(f"aligned@{interval}")
            if sync and aligned:
                gaps.append(sync["ratio"] - aligned["ratio"])
    if not gaps:
        return ""
    mean_gap = sum(gaps) / len(gaps)
    more_or_less = "more" if mean_gap >= 0 else "less"
    text = (
        f"**Against the paper.** Averaged over both hosts and every interval, the synchronous mode "
        f"costs {abs(mean_gap):.1%} of the baseline's run time {more_or_less} than ABS. "
    )
    if mean_gap < 0.015:
        text += (
            "The paper's contrast (synchronous snapshots dear at short intervals) does not show here, "
            "for three reasons. The state is small (see the size column), so a stop lasts the "
            "synchronous duration in the tables, a few tens of ms. A halted source loses little: "
            "in-process every task shares one thread, and the records still in flight keep it busy "
            "during the drain; on Spark, two workers share two cores with the JVM and the driver. "
            "And the paper measured Fig. 6 on a 10-node cluster, where every stop "
            "idles every machine. The contrast needs more workers than cores to spare, or state "
            "large enough that writing it takes longer than the drain."
        )
    return text


def _plot(result: dict[str, Any]) -> None:
    plt = pyplot()
    if plt is None:
        return
    hosts = [result["hosts"][k] for k in ("inprocess", "spark")]
    fig, axes = plt.subplots(1, 2, figsize=(10, 4), sharey=True)
    for ax, host in zip(axes, hosts):
        configs = host["fig6"]["configs"]
        for mode, label, style in (("aligned", "ABS", "o-"), ("synchronous", "synchronous", "s--")):
            xs = [i for i in INTERVALS if f"{mode}@{i}" in configs]
            ax.plot(xs, [configs[f"{mode}@{i}"]["ratio"] for i in xs], style, label=label)
        ax.axhline(1.0, color="black", linewidth=1, label="baseline (no snapshots)")
        ax.axhline(1 + TARGET_OVERHEAD, color="gray", linestyle=":", label="+3 % (target for ABS at 1 s)")
        ax.set_xticks(list(INTERVALS))
        ax.set_xticklabels([f"{i:g}" for i in INTERVALS])
        ax.set_xlabel("snapshot interval (s)")
        ax.set_title(f"{host['host']}, 2 workers")
        ax.legend(fontsize=8)
    axes[0].set_ylabel("run time ÷ baseline run time")
    fig.suptitle("Run time impact of snapshots (ABS paper, Fig. 6)")
    fig.tight_layout()
    save_figure(fig, "abs_fig6.png")

    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for ax, host in zip(axes, hosts):
        t = host["fig7"]["throughput"]
        ps = sorted(t, key=int)
        x = range(len(ps))
        ax.bar([i - 0.2 for i in x], [t[p]["baseline_records_per_s"] / 1e3 for p in ps], 0.4, label="baseline")
        ax.bar([i + 0.2 for i in x], [t[p]["abs_records_per_s"] / 1e3 for p in ps], 0.4,
               label=f"ABS, {FIG7_INTERVAL:g} s interval")
        ax.set_xticks(list(x))
        four = host["fig7"].get("four_workers_host")
        ax.set_xticklabels([f"{p}\n({four})" if p == "4" and four else p for p in ps])
        ax.set_xlabel(f"workers ({result['cores']} cores)")
        ax.set_ylabel("k records/s")
        ax.set_title(host["host"])
        ax.legend(fontsize=8)
    fig.suptitle("Throughput against workers (ABS paper, Fig. 7)")
    fig.tight_layout()
    save_figure(fig, "abs_fig7.png")
