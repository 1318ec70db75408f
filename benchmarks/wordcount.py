"""The word count as a user runs it, beside what they would use instead (issue 36's table).

One corpus: 2 M lines of 8 words (16 M words) drawn Zipf-like (exponent 1) from 100,000 distinct
words, in 20 text files. Every system reads those files, counts every word and writes the counts
out, and every output is checked exact against `collections.Counter`:

- **polars** on one thread (`POLARS_MAX_THREADS=1`): `scan_csv` → `str.split(" ")` → `explode`
  → `group_by().len()` → Parquet;
- **pyarrow** on one thread: `read_csv` → `split_pattern(" ")` → `value_counts` → Parquet;
- **`Counter` loop**, one core: `for line in file: counts.update(line.split())` → Parquet;
- **Epochal in-process** (one process, parallelism 1, checkpoints every second), per record
  (`flat_map(str.split).key_by(lambda w: w).count(...)`) and columnar
  (`map_batches(split).key_by("word").count(...)`), each with `emit="on_checkpoint"` into
  `ParquetSink` and with one update per record (`count()`) into a sink that discards;
- **Epochal on Spark** (`local[2]`, 2 workers, the same jobs into `ParquetSink`), timed from every
  worker running to the job finished (start-up excluded, shown apart);
- **Spark Structured Streaming** (`local[2]`, 2 shuffle partitions): `readStream.text` → `split`
  → `explode` → `groupBy().count()`, one file per micro-batch (Spark's checkpoint), update mode
  into Parquet (`foreachBatch`), timed from the query's start to its end (its session is up).

Each system runs in a process of its own (the Spark parts in one child with one session), in
rounds whose order rotates; ratios are taken within a round (the machine is shared and drifts)
and the median over rounds is reported, with the load average of each round.
"""

from __future__ import annotations

import collections
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

from .runner import ROOT, benchmark, pyplot, save_figure
from .spark_subprocess import run_on_spark, settle

LINES = 2_000_000
WORDS_PER_LINE = 8
VOCABULARY = 100_000
FILES = 20
SEED = 36
INTERVAL = 1.0
TARGETS = {"records-parquet/counter": 0.5, "columnar-parquet/polars": 0.6, "spark-columnar/polars": 1.0}


# -- the corpus -------------------------------------------------------------------------------------
def write_corpus(directory: str, lines: int = LINES, words_per_line: int = WORDS_PER_LINE,
                 vocabulary: int = VOCABULARY, files: int = FILES, seed: int = SEED) -> int:
    """`files` text files of `lines` lines of `words_per_line` words, drawn with probability
    proportional to 1/rank from `vocabulary` words (each `w<n>`, ranks shuffled); returns the
    number of words written."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    rng = np.random.default_rng(seed)
    cdf = np.cumsum(1.0 / np.arange(1, vocabulary + 1))
    cdf /= cdf[-1]
    vocab = pa.array([f"w{i}" for i in rng.permutation(vocabulary)])
    os.makedirs(directory, exist_ok=True)
    per_file = lines // files
    offsets = pa.array(np.arange(0, per_file * words_per_line + 1, words_per_line, dtype=np.int32))
    for f in range(files):
        ranks = np.minimum(np.searchsorted(cdf, rng.random(per_file * words_per_line), side="right"), vocabulary - 1)
        rows = pc.binary_join(pa.ListArray.from_arrays(offsets, vocab.take(pa.array(ranks))), " ")
        with open(os.path.join(directory, f"part-{f:02d}.txt"), "w") as out:
            out.write("\n".join(rows.to_pylist()))
            out.write("\n")
    return per_file * words_per_line * files


def corpus_files(directory: str) -> list[str]:
    return sorted(os.path.join(directory, f) for f in os.listdir(directory) if f.endswith(".txt"))


def counter_counts(directory: str) -> dict[str, int]:
    """The reference counts."""
    counts: collections.Counter[str] = collections.Counter()
    for path in corpus_files(directory):
        with open(path) as f:
            for line in f:
                counts.update(line.split())
    return dict(counts)


# -- the systems, each a child process --------------------------------------------------------------
_BASELINES = r"""
import collections, json, os, sys, time
which, corpus, out = sys.argv[1], sys.argv[2], sys.argv[3]
if which == "polars":
    os.environ["POLARS_MAX_THREADS"] = "1"
    import polars as pl
else:
    import pyarrow as pa, pyarrow.csv as pcsv, pyarrow.compute as pc, pyarrow.parquet as pq
    pa.set_cpu_count(1); pa.set_io_thread_count(1)
    pa.scalar(0)  # pyarrow imports pandas on its first Python scalar: before the clock, as every import
files = sorted(os.path.join(corpus, f) for f in os.listdir(corpus) if f.endswith(".txt"))
started, cpu = time.perf_counter(), time.process_time()
if which == "polars":
    lines = pl.scan_csv(files, has_header=False, separator="\x1f", quote_char=None, new_columns=["line"])
    words = lines.select(pl.col("line").str.split(" ").explode().alias("word")).filter(pl.col("word") != "")
    counts = words.group_by("word").len().collect()
    counts.write_parquet(out)
    threads = pl.thread_pool_size()
elif which == "pyarrow":
    read = pcsv.ReadOptions(use_threads=False, column_names=["line"])
    parse = pcsv.ParseOptions(delimiter="\x1f", quote_char=False)
    lines = pa.concat_tables([pcsv.read_csv(p, read_options=read, parse_options=parse) for p in files])
    words = pc.list_flatten(pc.split_pattern(lines.column("line"), " "))
    vc = pc.value_counts(pc.filter(words, pc.not_equal(words, "")))
    pq.write_table(pa.table({"word": vc.field("values"), "count": vc.field("counts")}), out)
    threads = 1
else:
    counts = collections.Counter()
    for p in files:
        with open(p) as f:
            for line in f:
                counts.update(line.split())
    pq.write_table(pa.table({"word": list(counts), "count": list(counts.values())}), out)
    threads = 1
seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
print("RESULT " + json.dumps({"seconds": seconds, "cpu_seconds": cpu, "threads": threads}))
"""

EPOCHAL_JOBS = ("records-parquet", "records-discard", "columnar-parquet", "columnar-discard")


def build_job(env: Any, corpus: str, job: str, out: str) -> None:
    """One of the Epochal word counts (`EPOCHAL_JOBS`) on `env`."""
    from epochal.connectors import ParquetSink, TextFileSource

    from . import workloads as w

    lines = env.from_source(TextFileSource(corpus))
    emit = "on_checkpoint" if job.endswith("parquet") else "per_record"
    if job.startswith("records"):
        counts = lines.flat_map(str.split).key_by(w.identity).count(emit=emit)
    else:
        counts = lines.map_batches(w.split_on_spaces).key_by("word").count(emit=emit)
    counts.sink_to(ParquetSink(out) if job.endswith("parquet") else w.NullSink())


def words_counted(result: Any) -> int:
    """Words the job's count took in: its local phase's input where it has one."""
    names = {op.name for op in result.operators}
    return result.operator("count-local" if "count-local" in names else "count").records_in


def epochal_inprocess(corpus: str, job: str, out: str, checkpoints: str) -> dict[str, Any]:
    """One in-process run (called in a child process)."""
    import epochal.cluster.inprocess  # noqa: F401 - the library imported before the clock, as polars is
    from epochal import CheckpointConfig, StreamEnvironment

    env = StreamEnvironment(parallelism=1, executor="inprocess",
                            checkpoint=CheckpointConfig(interval=INTERVAL, directory=checkpoints))
    build_job(env, corpus, job, out)
    started, cpu = time.perf_counter(), time.process_time()
    result = env.execute(f"wordcount-{job}")
    seconds = time.perf_counter() - started
    return {"seconds": seconds, "cpu_seconds": time.process_time() - cpu, "words": words_counted(result),
            "checkpoints": len(result.checkpoints)}


_EPOCHAL_CHILD = r"""
import json, sys
sys.path.insert(0, {root!r})
from benchmarks import wordcount
print("RESULT " + json.dumps(wordcount.epochal_inprocess(*sys.argv[1:])))
"""


def _child(args: list[str], script: str) -> dict[str, Any]:
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    done = subprocess.run([sys.executable, "-c", script, *args], capture_output=True, text=True, timeout=3600,
                          env=env)
    lines = [x for x in done.stdout.splitlines() if x.startswith("RESULT ")]
    if done.returncode != 0 or not lines:
        raise RuntimeError(f"word count child {args[:2]} failed:\n{done.stderr[-4000:]}")
    return dict(json.loads(lines[-1][len("RESULT "):]))


def run_system(system: str, corpus: str) -> dict[str, Any]:
    """One run of one local system, its output checked later: `{seconds, output, ...}`."""
    work = tempfile.mkdtemp(prefix=f"epochal-wordcount-{system}-")
    out = os.path.join(work, "out.parquet" if system in ("polars", "pyarrow", "counter") else "out")
    if system in ("polars", "pyarrow", "counter"):
        result = _child([system, corpus, out], _BASELINES)
    else:
        result = _child([corpus, system, out, os.path.join(work, "ckpt")],
                        _EPOCHAL_CHILD.format(root=ROOT))
    return {**result, "system": system, "output": out, "work": work, "load": os.getloadavg()[0]}


# -- Spark: Epochal on 2 workers and Structured Streaming ------------------------------------------
SPARK_JOBS = ("records-parquet", "columnar-parquet")


def spark_part(session: Any, corpus: str, reps: int, outputs: str) -> dict[str, Any]:
    """Epochal's jobs on Spark and Spark SS's word count, `reps` rounds (a child process)."""
    from epochal import CheckpointConfig, StreamEnvironment
    from epochal.cluster.spark import SparkExecutor

    runs: dict[str, list[dict[str, Any]]] = {j: [] for j in (*SPARK_JOBS, "spark-ss")}
    warm = tempfile.mkdtemp(prefix="epochal-wordcount-warm-")
    small = os.path.join(warm, "corpus")
    write_corpus(small, lines=20_000, files=2, vocabulary=1000)
    for job in SPARK_JOBS + ("spark-ss",):  # the first job of a session pays the workers' imports
        _spark_run(session, small, job, os.path.join(warm, job), StreamEnvironment, CheckpointConfig, SparkExecutor)
    shutil.rmtree(warm, ignore_errors=True)
    for r in range(reps):
        order = [*SPARK_JOBS, "spark-ss"]
        order = order[r % len(order):] + order[: r % len(order)]
        for job in order:
            out = os.path.join(outputs, f"{job}-{r}")
            runs[job].append(_spark_run(session, corpus, job, out, StreamEnvironment, CheckpointConfig,
                                        SparkExecutor))
    return runs


def _spark_run(session: Any, corpus: str, job: str, out: str, env_type: Any, config: Any, executor_type: Any
               ) -> dict[str, Any]:
    work = tempfile.mkdtemp(prefix=f"epochal-wordcount-spark-{job}-")
    settled = settle()  # the JVM done with the previous run's compiling and collecting
    load = os.getloadavg()[0]
    try:
        if job == "spark-ss":
            return {**spark_ss(session, corpus, out, os.path.join(work, "ckpt")), "output": out, "load": load,
                    "settled_seconds": settled}
        env = env_type(parallelism=2, spark=session,
                       checkpoint=config(interval=INTERVAL, directory=os.path.join(work, "ckpt")))
        build_job(env, corpus, job, out)
        executor = executor_type(session)
        started, cpu = time.perf_counter(), _tree_cpu()
        result = executor.execute(env.job_graph(f"wordcount-{job}"))
        whole, cpu = time.perf_counter() - started, _tree_cpu() - cpu
        events = dict(executor.timeline)
        return {"seconds": events["finished"] - events["running"], "whole_seconds": whole, "cpu_seconds": cpu,
                "startup_seconds": events["running"] - events.get("submitted", events["running"]),
                "words": words_counted(result), "checkpoints": len(result.checkpoints), "output": out, "load": load,
                "settled_seconds": settled}
    finally:
        shutil.rmtree(work, ignore_errors=True)


def spark_ss(session: Any, corpus: str, out: str, checkpoint: str) -> dict[str, Any]:
    """Spark Structured Streaming's word count: one file a micro-batch, update mode, Parquet out."""
    from pyspark.sql import functions as F

    session.conf.set("spark.sql.shuffle.partitions", "2")
    lines = session.readStream.option("maxFilesPerTrigger", 1).text(corpus)
    words = lines.select(F.explode(F.split(F.col("value"), " ")).alias("word")).where(F.col("word") != "")
    counts = words.groupBy("word").count()

    def write(batch: Any, batch_id: int) -> None:
        batch.write.mode("append").parquet(out)

    started, cpu = time.perf_counter(), _tree_cpu()
    query = (counts.writeStream.outputMode("update").foreachBatch(write).option("checkpointLocation", checkpoint)
             .trigger(availableNow=True).start())
    query.awaitTermination()
    seconds, cpu = time.perf_counter() - started, _tree_cpu() - cpu
    return {"seconds": seconds, "cpu_seconds": cpu, "micro_batches": len(query.recentProgress)}


def _tree_cpu() -> float:
    """CPU seconds of this process and its descendants so far (Spark's JVM and Python workers):
    what a run on Spark costs, whatever share of the machine it got."""
    from .nexmark import cpu_seconds

    return cpu_seconds() or 0.0


# -- checking and the run ---------------------------------------------------------------------------
def final_counts(path: str) -> dict[str, int]:
    """The newest count of every word in a Parquet output (a count only grows)."""
    import pyarrow.compute as pc
    import pyarrow.dataset as ds

    table = ds.dataset(path, format="parquet", exclude_invalid_files=True).to_table()
    names = table.column_names
    word, count = names[0], names[-1]
    grouped = table.group_by(word).aggregate([(count, "max")])
    return dict(zip(grouped.column(word).to_pylist(), pc.cast(grouped.column(f"{count}_max"), "int64").to_pylist()))


def check(run: dict[str, Any], expected: dict[str, int], words: int) -> None:
    if "words" in run and run["words"] != words:
        raise RuntimeError(f"{run['system']}: counted {run['words']} words of {words}")
    if run["system"].endswith("discard"):
        return
    got = final_counts(run["output"])
    if got != expected:
        wrong = next((w for w in expected if got.get(w) != expected[w]), next(iter(set(got) - set(expected)), None))
        raise RuntimeError(f"{run['system']}: counts differ from Counter's ({len(got)} words against "
                           f"{len(expected)}; e.g. {wrong!r}: {got.get(wrong)} against {expected.get(wrong)})")


LOCAL = ("polars", "pyarrow", "counter", *(f"epochal-{j}" for j in EPOCHAL_JOBS))


@benchmark("wordcount", "Word count from 20 text files: polars, pyarrow, Counter, Epochal, Spark SS (issue 36)")
def run(quick: bool) -> dict[str, Any]:
    lines = 100_000 if quick else int(os.environ.get("EPOCHAL_WORDCOUNT_LINES", LINES))
    reps = 1 if quick else int(os.environ.get("EPOCHAL_WORDCOUNT_REPS", 3))
    corpus = tempfile.mkdtemp(prefix="epochal-wordcount-corpus-")
    outputs = tempfile.mkdtemp(prefix="epochal-wordcount-spark-out-")
    try:
        words = write_corpus(corpus, lines=lines, vocabulary=VOCABULARY if not quick else 10_000)
        expected = counter_counts(corpus)
        rounds: list[dict[str, dict[str, Any]]] = []
        for r in range(reps):
            order = list(LOCAL[r % len(LOCAL):] + LOCAL[: r % len(LOCAL)])
            this: dict[str, dict[str, Any]] = {}
            for system in order:
                name = system.removeprefix("epochal-")
                run_ = run_system(name, corpus)
                run_["system"] = system
                check(run_, expected, words)
                shutil.rmtree(run_.pop("work"), ignore_errors=True)
                this[system] = run_
            rounds.append(this)
        spark = run_on_spark("local[2]", "benchmarks.wordcount", "spark_part", timeout=7200, corpus=corpus,
                             reps=reps, outputs=outputs)
        for job, job_runs in spark.items():
            for run_ in job_runs:
                run_["system"] = f"spark-{job}" if job != "spark-ss" else job
                check(run_, expected, words)
    finally:
        shutil.rmtree(corpus, ignore_errors=True)
        shutil.rmtree(outputs, ignore_errors=True)
    result: dict[str, Any] = {"words": words, "lines": lines, "reps": reps, "rounds": rounds, "spark": spark,
                              "distinct": len(expected), "interval": INTERVAL, "cores": os.cpu_count()}
    result["table"] = table(result)
    _plot(result)
    result["summary"] = _summary(result)
    return result


def table(result: dict[str, Any]) -> dict[str, dict[str, float]]:
    """Words/s of every system (median over rounds) and its ratio to polars and to Counter
    (median of the ratios within a round; Spark's against the local rounds' medians)."""
    words = result["words"]
    rows: dict[str, dict[str, float]] = {}
    for system in LOCAL:
        rates = [words / r[system]["seconds"] for r in result["rounds"]]
        rows[system] = {"words_per_s": statistics.median(rates),
                        "words_per_cpu_s": statistics.median(
                            words / r[system]["cpu_seconds"] for r in result["rounds"]),
                        "vs_polars": statistics.median(words / r[system]["seconds"] / (words / r["polars"]["seconds"])
                                                       for r in result["rounds"]),
                        "vs_counter": statistics.median(
                            words / r[system]["seconds"] / (words / r["counter"]["seconds"]) for r in result["rounds"])}
    for job, runs in result["spark"].items():
        name = f"spark-{job}" if job != "spark-ss" else job
        rate = statistics.median(words / r["seconds"] for r in runs)
        rows[name] = {"words_per_s": rate, "vs_polars": rate / rows["polars"]["words_per_s"],
                      "words_per_cpu_s": statistics.median(words / r["cpu_seconds"] for r in runs),
                      "vs_counter": rate / rows["counter"]["words_per_s"],
                      "startup_s": statistics.median(r.get("startup_seconds", 0.0) for r in runs)}
    return rows


_LABELS = {
    "polars": "polars, 1 thread (read, split, count, Parquet out)",
    "pyarrow": "pyarrow, 1 thread (read, split, value_counts, Parquet out)",
    "counter": "`collections.Counter` loop, 1 core (Parquet out)",
    "epochal-records-parquet": "Epochal in-process, **per record**, `count(emit=\"on_checkpoint\")` → `ParquetSink`",
    "epochal-records-discard": "Epochal in-process, per record, `count()` (an update per word) → discard",
    "epochal-columnar-parquet": "Epochal in-process, **columnar**, `count(emit=\"on_checkpoint\")` → `ParquetSink`",
    "epochal-columnar-discard": "Epochal in-process, columnar, `count()` (an update per word) → discard",
    "spark-columnar-parquet": "Epochal on Spark, 2 workers, **columnar** → `ParquetSink` (start-up excluded)",
    "spark-records-parquet": "Epochal on Spark, 2 workers, per record → `ParquetSink` (start-up excluded)",
    "spark-ss": "Spark Structured Streaming, `local[2]` (one file a micro-batch, Parquet out)",
}


def _summary(result: dict[str, Any]) -> str:
    rows = result["table"]
    loads = [r[s]["load"] for r in result["rounds"] for s in r]
    lines = [
        f"{result['words']:,} words ({result['lines']:,} lines of {WORDS_PER_LINE}, {result['distinct']:,} distinct, "
        f"Zipf) in {FILES} text files; every system reads the files, counts and writes the counts, and every output "
        "is checked exact against `collections.Counter`. Epochal checkpoints every "
        f"{result['interval']:g} s. Local systems: one process each, {result['reps']} rounds in rotating order, "
        "median of the rounds (ratios taken within each round); the Spark parts: one session on `local[2]`. "
        f"Load average during the local runs {min(loads):.1f}–{max(loads):.1f} on {result['cores']} cores.",
        "",
        "| system | words/s | vs polars 1 thread | vs `Counter` | words per CPU-second |",
        "|---|---:|---:|---:|---:|",
    ]
    for system, row in rows.items():
        extra = f" (start-up {row['startup_s']:.1f} s)" if row.get("startup_s") else ""
        lines.append(f"| {_LABELS.get(system, system)}{extra} | {row['words_per_s'] / 1e6:.2f} M | "
                     f"{row['vs_polars']:.2f} | {row['vs_counter']:.2f} | {row['words_per_cpu_s'] / 1e6:.2f} M |")
    verdicts = []
    for key, target in TARGETS.items():
        system, base = key.split("/")
        system = {"records-parquet": "epochal-records-parquet", "columnar-parquet": "epochal-columnar-parquet",
                  "spark-columnar": "spark-columnar-parquet"}[system]
        got = rows[system][f"vs_{base}"]
        verdicts.append(f"{_LABELS[system]}: {got:.2f}× {base} (target {target:g}×: "
                        f"{'met' if got >= target else 'NOT met'})")
    lines += ["", "Words per CPU-second: the CPU time the system used while it counted (user and system, every "
              "thread; on Spark the JVM's and every worker's too), a figure the machine's other load moves "
              "less than the wall clock's.", "",
              "Targets (issue 36):", "", *[f"- {v}" for v in verdicts], "",
              "![Word count, files in, counts out](img/wordcount.png)", ""]
    return "\n".join(lines)


def _plot(result: dict[str, Any]) -> None:
    plt = pyplot()
    if plt is None:
        return
    rows = result["table"]
    names = list(rows)
    fig, ax = plt.subplots(figsize=(9, 4.5))
    colours = ["C2" if n in ("polars", "pyarrow", "counter", "spark-ss") else "C0" for n in names]
    ax.barh(range(len(names)), [rows[n]["words_per_s"] / 1e6 for n in names], color=colours)
    ax.set_yticks(range(len(names)))
    ax.set_yticklabels(names, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("million words/s")
    ax.set_title("Word count, 20 files in, counts out (green: other systems)")
    fig.tight_layout()
    save_figure(fig, "wordcount.png")
