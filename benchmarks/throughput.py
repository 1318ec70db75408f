"""Throughput per core of the keyed word count, beside a one-core ceiling of the same input.

- columnar path: `map_batches(split with pyarrow.compute.utf8_split_whitespace)` then
  `key_by("word").count()`: the count is vectorized per batch, keys stay in Arrow;
- per-record path: `flat_map(str.split).key_by(lambda w: w).count()`: Python records;
- ceiling: plain pyarrow split-and-count (`value_counts`) of the whole corpus in one call, on one
  core, no engine (and polars, if it happens to be installed).

The corpus is in memory (lines drawn Zipf-like from a 20k-word vocabulary), so no file I/O is
measured on either side. Parallelism 1 in-process is exactly one core. On Spark, the run time
is from "every worker running" to "job finished" (start-up is measured in `startup_recovery`).
"""

from __future__ import annotations

import os
import time
from typing import Any

from .runner import benchmark, pyplot, save_figure, timed_execute
from .spark_subprocess import run_on_spark

DEFAULT_BATCH = 1024  # lines per source batch: the environment's default
LARGE_BATCH = 8192


def wordcount_env(
    lines: Any, columnar: bool, parallelism: int, batch_size: int, executor: str, session: Any = None
) -> Any:
    from epochal import StreamEnvironment

    from . import workloads as w

    env = StreamEnvironment(parallelism=parallelism, executor=executor, spark=session, batch_size=batch_size)
    stream = env.from_source(w.CorpusSource(lines, parallelism, arrow=columnar))
    if columnar:
        counts = stream.map_batches(w.split_words).key_by("word").count()
    else:
        counts = stream.flat_map(str.split).key_by(w.identity).count()
    counts.sink_to(w.NullSink())
    return env


def run_wordcount(
    lines: Any,
    columnar: bool,
    parallelism: int = 1,
    batch_size: int = DEFAULT_BATCH,
    session: Any = None,
) -> dict[str, Any]:
    """One word count run: words/s over the run (in-process: execute(); Spark: running → finished)."""
    env = wordcount_env(lines, columnar, parallelism, batch_size, "spark" if session else "inprocess", session)
    job = env.job_graph("wordcount-" + ("columnar" if columnar else "records"))
    result, seconds = timed_execute(job, session)
    words = result.operator("count").records_in
    return {"words": words, "seconds": seconds, "words_per_s": words / seconds}


def _best(runs: list[dict[str, Any]]) -> dict[str, Any]:
    best = max(runs, key=lambda r: r["words_per_s"])
    return {**best, "runs_words_per_s": [r["words_per_s"] for r in runs]}


def ceilings(lines: Any, reps: int) -> dict[str, Any]:
    from . import workloads as w

    out: dict[str, Any] = {}
    for name, fn in (("pyarrow", w.pyarrow_ceiling), ("polars", w.polars_ceiling)):
        rates = []
        for _ in range(reps):
            started = time.perf_counter()
            total = fn(lines)
            seconds = time.perf_counter() - started
            if total is None:
                break
            rates.append(total / seconds)
        if rates:
            out[name] = {"words_per_s": max(rates), "runs_words_per_s": rates}
    return out


def measure(words: int, reps: int, parallelisms: tuple[int, ...] = (1,), session: Any = None) -> dict[str, Any]:
    """Ceilings and both paths on one host; the core of the benchmark (and of its smoke test)."""
    from . import workloads as w

    lines = w.make_corpus(words)
    out: dict[str, Any] = {"words": words, "ceiling": ceilings(lines, reps), "paths": {}}
    for p in parallelisms:
        variants = [
            ("columnar", True, DEFAULT_BATCH),
            ("columnar, large batches", True, LARGE_BATCH),
            ("per-record", False, DEFAULT_BATCH),
        ]
        for label, columnar, batch in variants:
            runs = [run_wordcount(lines, columnar, p, batch, session) for _ in range(reps)]
            for r in runs:
                if r["words"] != words:
                    raise RuntimeError(f"{label}: counted {r['words']} words of {words}")
            out["paths"][f"{label} @p{p}"] = {
                "path": label, "parallelism": p, "batch_lines": batch, **_best(runs),
                "words_per_s_per_core": _best(runs)["words_per_s"] / p,
            }
    return out


def spark_part(session: Any, words: int, reps: int, parallelisms: list[int]) -> dict[str, Any]:
    """The Spark side, run in a child process by `run_on_spark`."""
    return measure(words, reps, tuple(parallelisms), session)


@benchmark("throughput", "Word count throughput per core, against a one-core pyarrow ceiling")
def run(quick: bool) -> dict[str, Any]:
    words = 300_000 if quick else 4_000_000
    reps = 1 if quick else 3
    cores = os.cpu_count() or 1
    results = {
        "inprocess": {"host": "in-process", **measure(words, reps)},
        "spark": {
            "host": f"spark local[{min(2, cores)}]",
            **run_on_spark(f"local[{min(2, cores)}]", "benchmarks.throughput", "spark_part",
                           words=words, reps=reps, parallelisms=[1, 2] if cores >= 2 else [1]),
        },
    }
    result: dict[str, Any] = {"words": words, "reps": reps, "hosts": results}
    _plot(result)
    result["summary"] = _summary(result)
    return result


def _summary(result: dict[str, Any]) -> str:
    lines = [
        f"Keyed word count of {result['words']:,} words (in-memory corpus, Zipf-like over 20k words, "
        f"8 words a line), best of {result['reps']}; the ceiling is plain pyarrow "
        "`utf8_split_whitespace` + `value_counts` of the whole corpus in one call on one core, "
        "measured in the same run. Throughput per core = words/s ÷ workers.",
        "",
        "| host | path | workers | batch (lines) | M words/s | M words/s per core | of ceiling |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    verdicts = []
    for key in ("inprocess", "spark"):
        host = result["hosts"][key]
        ceiling = host["ceiling"]["pyarrow"]["words_per_s"]
        lines.append(
            f"| {host['host']} | ceiling: pyarrow, one call | — | all | {ceiling / 1e6:.2f} | {ceiling / 1e6:.2f} "
            "| 100 % |"
        )
        if "polars" in host["ceiling"]:
            pol = host["ceiling"]["polars"]["words_per_s"]
            lines.append(
                f"| {host['host']} | ceiling: polars | — | all | {pol / 1e6:.2f} | {pol / 1e6:.2f} "
                f"| {pol / ceiling:.0%} |"
            )
        for _name, r in host["paths"].items():
            share = r["words_per_s_per_core"] / ceiling
            lines.append(
                f"| {host['host']} | {r['path']} | {r['parallelism']} | {r['batch_lines']} | "
                f"{r['words_per_s'] / 1e6:.2f} | {r['words_per_s_per_core'] / 1e6:.2f} | {share:.0%} |"
            )
            if r["path"].startswith("columnar") and r["parallelism"] == 1:
                verdicts.append(
                    f"{host['host']}, {r['path']}: {share:.0%} of the ceiling "
                    f"({'meets' if share >= 0.5 else 'misses'} the 50 % target)"
                )
    lines += ["", "Target: the columnar path reaches at least half the ceiling per core. "
              + "; ".join(verdicts) + ".", "", "![word count throughput](img/throughput.png)", ""]
    return "\n".join(lines)


def _plot(result: dict[str, Any]) -> None:
    plt = pyplot()
    if plt is None:
        return
    widths = [len(result["hosts"][k]["paths"]) for k in ("inprocess", "spark")]
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2), sharey=True, gridspec_kw={"width_ratios": widths})
    short = {"columnar": "columnar\n1k lines", "columnar, large batches": "columnar\n8k lines",
             "per-record": "per-record\n1k lines"}
    for ax, key in zip(axes, ("inprocess", "spark")):
        host = result["hosts"][key]
        ceiling = host["ceiling"]["pyarrow"]["words_per_s"] / 1e6
        names = [f"{short.get(r['path'], r['path'])}\n{r['parallelism']} worker{'s' if r['parallelism'] > 1 else ''}"
                 for r in host["paths"].values()]
        values = [r["words_per_s_per_core"] / 1e6 for r in host["paths"].values()]
        colors = ["#4C72B0" if r["path"].startswith("columnar") else "#DD8452" for r in host["paths"].values()]
        ax.bar(range(len(values)), values, color=colors)
        ax.axhline(ceiling, color="black", linestyle="-", label=f"pyarrow ceiling {ceiling:.1f}")
        ax.axhline(ceiling / 2, color="gray", linestyle="--", label="half the ceiling (target)")
        ax.set_xticks(range(len(values)))
        ax.set_xticklabels(names, fontsize=8)
        ax.set_title(host["host"])
        ax.legend(fontsize=8, loc="center right")
    axes[0].set_ylabel("M words/s per core")
    fig.suptitle("Keyed word count: throughput per core")
    fig.tight_layout()
    save_figure(fig, "throughput.png")
