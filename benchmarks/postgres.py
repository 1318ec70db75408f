"""PostgreSQL in and out: the sink against psycopg writing the same rows, the CDC source against
psycopg reading the same changes, on a real server started for the run.

- Sink, one core: 1,000,000 rows (id, name, amount) from Parquet files, `ParquetSource ->
  PostgresSink` in-process at parallelism 1 with checkpoints every second (append, and upsert
  on `id`), beside the same job into a discarding sink; and psycopg in one process writing the
  same rows: COPY row by row (`copy.write_row`), and `executemany` of an INSERT (psycopg 3
  pipelines it).
- Sink on Spark: the word count of `sinks` (2 workers, `emit="on_checkpoint"`, 1 s
  checkpoints) into a discarding sink and into PostgresSink, appends and upserts.
- CDC, one core: the changes of a table (inserts in transactions of 1,000 rows, then updates),
  read from a copy of the slot by `PostgresCdcSource`'s reader into Arrow batches, beside psycopg
  fetching the same pgoutput messages with the same SQL function (bytes, nothing decoded), and
  the whole job `PostgresCdcSource -> discard` in-process.

The server runs with fsync off (a throw-away server, `connectors.postgres.server`): the numbers
are the client's and the server's CPU, not a disk's.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from typing import Any

from .runner import benchmark
from .spark_subprocess import run_on_spark

INTERVAL = 1.0
SINK_ROWS = 1_000_000
EXECUTEMANY_ROWS = 200_000
CDC_ROWS = 500_000


def _rows(n: int) -> Any:
    import pyarrow as pa

    ids = pa.array(range(n), pa.int64())
    return pa.table({"id": ids, "name": pa.array([f"name-{i % 9973}" for i in range(n)]),
                     "amount": pa.array([i * 0.25 for i in range(n)], pa.float64())})


def _sql(dsn: str, query: str) -> Any:
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        cur = conn.execute(query)
        return cur.fetchall() if cur.description else None


def _fresh_table(dsn: str, name: str, key: bool) -> None:
    _sql(dsn, f"DROP TABLE IF EXISTS {name}; CREATE TABLE {name} (id bigint{' PRIMARY KEY' if key else ''}, "
              "name text, amount float8)")


def _job(dsn: str, data: str, ckpt: str, target: str) -> tuple[float, int]:
    from epochal import CheckpointConfig, StreamEnvironment
    from epochal.cluster.inprocess import InProcessExecutor
    from epochal.connectors import ParquetSource, PostgresSink

    from . import workloads as w

    env = StreamEnvironment(parallelism=1, executor="inprocess",
                            checkpoint=CheckpointConfig(interval=INTERVAL, directory=ckpt))
    sink = {"discard": lambda: w.NullSink(), "append": lambda: PostgresSink(dsn, "bench_append", mode="overwrite"),
            "upsert": lambda: PostgresSink(dsn, "bench_upsert", key="id", mode="overwrite")}[target]()
    env.from_source(ParquetSource(data)).sink_to(sink)
    started = time.perf_counter()
    result = InProcessExecutor().execute(env.job_graph(f"pg-{target}"))
    return time.perf_counter() - started, result.operator("sink").records_in


def _psycopg_copy(dsn: str, table: Any) -> float:
    import psycopg

    _fresh_table(dsn, "bench_copy", False)
    rows = zip(*(c.to_pylist() for c in table.columns))
    started = time.perf_counter()
    with psycopg.connect(dsn) as conn, conn.cursor() as cur:
        with cur.copy("COPY bench_copy (id, name, amount) FROM STDIN") as copy:
            for row in rows:
                copy.write_row(row)
    return time.perf_counter() - started


def _psycopg_executemany(dsn: str, table: Any) -> float:
    import psycopg

    _fresh_table(dsn, "bench_many", False)
    rows = list(zip(*(c.to_pylist() for c in table.columns)))
    started = time.perf_counter()
    with psycopg.connect(dsn) as conn, conn.cursor() as cur:
        cur.executemany("INSERT INTO bench_many (id, name, amount) VALUES (%s, %s, %s)", rows)
    return time.perf_counter() - started


def sink_rows(dsn: str, work: str, reps: int) -> dict[str, Any]:
    import pyarrow.parquet as pq

    table = _rows(SINK_ROWS)
    data = os.path.join(work, "rows")
    os.makedirs(data, exist_ok=True)
    for i in range(8):  # 8 files of row groups of 65,536 rows
        part = table.slice(i * SINK_ROWS // 8, SINK_ROWS // 8)
        pq.write_table(part, os.path.join(data, f"part-{i}.parquet"), row_group_size=65_536)
    runs: dict[str, list[float]] = {k: [] for k in ("discard", "append", "upsert", "copy", "executemany")}
    for r in range(reps):
        for target in ("discard", "append", "upsert"):
            _fresh_table(dsn, f"bench_{target}", target == "upsert")
            seconds, rows = _job(dsn, data, os.path.join(work, f"ckpt-{target}-{r}"), target)
            if rows != SINK_ROWS:
                raise RuntimeError(f"{target}: {rows} rows of {SINK_ROWS}")
            if target != "discard":
                count = _sql(dsn, f"SELECT count(*) FROM bench_{target}")[0][0]
                if count != SINK_ROWS:
                    raise RuntimeError(f"{target}: {count} rows in the table, not {SINK_ROWS}")
            runs[target].append(SINK_ROWS / seconds)
        runs["copy"].append(SINK_ROWS / _psycopg_copy(dsn, table))
        runs["executemany"].append(EXECUTEMANY_ROWS / _psycopg_executemany(dsn, table.slice(0, EXECUTEMANY_ROWS)))
    return {k: max(v) for k, v in runs.items()}


def spark_wordcount(session: Any, corpus: str, dsn: str, reps: int) -> dict[str, Any]:
    """The word count into each sink on Spark (called in a child process by `run_on_spark`)."""
    from epochal import CheckpointConfig, StreamEnvironment
    from epochal.cluster.spark import SparkExecutor
    from epochal.connectors import PostgresSink, TextFileSource

    from . import workloads as w

    out: dict[str, list[dict[str, Any]]] = {"discard": [], "append": [], "upsert": []}
    for r in range(reps + 1):  # the first round warms the workers up and is dropped
        for target in out:
            _sql(dsn, "DROP TABLE IF EXISTS wc_append; CREATE TABLE wc_append (word text, n bigint); "
                      "DROP TABLE IF EXISTS wc_upsert; CREATE TABLE wc_upsert (word text PRIMARY KEY, n bigint)")
            work = tempfile.mkdtemp(prefix="epochal-pg-wc-")
            try:
                env = StreamEnvironment(parallelism=2, spark=session, checkpoint=CheckpointConfig(
                    interval=INTERVAL, directory=os.path.join(work, "ckpt")))
                counts = (env.from_source(TextFileSource(corpus)).map_batches(w.split_words).key_by("word")
                          .count(emit="on_checkpoint"))
                sink = {"discard": lambda: w.NullSink(),
                        "append": lambda: PostgresSink(dsn, "wc_append", mode="overwrite"),
                        "upsert": lambda: PostgresSink(dsn, "wc_upsert", key="word", mode="overwrite")}[target]()
                counts.key_by(lambda r: r[0]).sink_to(sink) if target == "upsert" else counts.sink_to(sink)
                executor = SparkExecutor(session)
                result = executor.execute(env.job_graph(f"wc-{target}"))
                events = dict(executor.timeline)
                seconds = events["finished"] - events["running"]
                words = result.operator("count").records_in
                if r:
                    out[target].append({"seconds": seconds, "words": words, "words_per_s": words / seconds,
                                        "rows_out": result.operator("count").records_out})
            finally:
                shutil.rmtree(work, ignore_errors=True)
    return out


def _fill_changes(dsn: str, reps: int) -> None:
    import psycopg

    from epochal.connectors import PostgresCdcSource

    _sql(dsn, "DROP TABLE IF EXISTS cdc_src; CREATE TABLE cdc_src (id bigint PRIMARY KEY, name text, amount float8)")
    for slot in ["bench", *(f"bench_job{r}" for r in range(reps))]:  # a job moves its slot on: one per run
        PostgresCdcSource(dsn, "cdc_src", slot=slot).check()
    table = _rows(CDC_ROWS)
    rows = list(zip(*(c.to_pylist() for c in table.columns)))
    with psycopg.connect(dsn) as conn:
        for start in range(0, CDC_ROWS, 1000):
            with conn.cursor() as cur, cur.copy("COPY cdc_src (id, name, amount) FROM STDIN") as copy:
                for row in rows[start : start + 1000]:
                    copy.write_row(row)
            conn.commit()
        conn.execute("UPDATE cdc_src SET amount = amount + 1 WHERE id % 10 = 0")
        conn.commit()


def cdc_read(dsn: str, work: str, reps: int) -> dict[str, Any]:
    import psycopg

    from epochal import CheckpointConfig, StreamEnvironment
    from epochal.cluster.inprocess import InProcessExecutor
    from epochal.connectors import PostgresCdcSource

    from . import workloads as w

    _fill_changes(dsn, reps)
    changes = CDC_ROWS + CDC_ROWS // 10
    ours, raw, job = [], [], []
    for r in range(reps):
        source = PostgresCdcSource(dsn, "cdc_src", slot="bench", bounded=True)
        started = time.perf_counter()
        reader, got = source.open_split(source.splits()[0], None), 0
        while (batch := reader.read(10_000)) is not None:
            got += 0 if isinstance(batch, list) else batch.num_rows
        reader.close()
        ours.append(changes / (time.perf_counter() - started))
        if got != changes:
            raise RuntimeError(f"the CDC reader read {got} changes of {changes}")
        started = time.perf_counter()
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("SELECT pg_copy_logical_replication_slot('bench', 'bench_raw', true)")
            messages = 0
            while True:
                rows = conn.execute("SELECT data FROM pg_logical_slot_get_binary_changes('bench_raw', NULL, 20000, "
                                    "'proto_version', '1', 'publication_names', 'bench')").fetchall()
                if not rows:
                    break
                messages += len(rows)
        raw.append(changes / (time.perf_counter() - started))
        env = StreamEnvironment(parallelism=1, executor="inprocess",
                                checkpoint=CheckpointConfig(interval=INTERVAL, directory=os.path.join(work, f"c{r}")))
        env.from_source(PostgresCdcSource(dsn, "cdc_src", slot=f"bench_job{r}", bounded=True)).sink_to(w.NullSink())
        started = time.perf_counter()
        result = InProcessExecutor().execute(env.job_graph("cdc"))
        job.append(result.operator("sink").records_in / (time.perf_counter() - started))
        if result.operator("sink").records_in != changes:
            raise RuntimeError(f"the CDC job read {result.operator('sink').records_in} changes of {changes}")
    return {"changes": changes, "messages": messages, "reader": max(ours), "psycopg": max(raw), "job": max(job)}


@benchmark("postgres", "PostgreSQL: the sink against psycopg writing the same rows, CDC against psycopg reading")
def run(quick: bool) -> dict[str, Any]:
    from epochal.connectors.postgres.server import LocalPostgres

    from .sinks import write_corpus

    reps = 1 if quick else 2
    work = tempfile.mkdtemp(prefix="epochal-bench-pg-")
    server = LocalPostgres(tempfile.mkdtemp(prefix="epochal-bench-pgdata-")).start()
    try:
        sink = sink_rows(server.dsn, work, reps)
        cdc = cdc_read(server.dsn, work, reps)
        corpus = os.path.join(work, "corpus")
        words = write_corpus(corpus, 400_000 if quick else 4_000_000)
        wordcount = run_on_spark("local[2]", "benchmarks.postgres", "spark_wordcount", corpus=corpus,
                                 dsn=server.dsn, reps=reps)
    finally:
        server.stop("immediate")
        shutil.rmtree(server.directory, ignore_errors=True)
        shutil.rmtree(work, ignore_errors=True)
    for target, runs in wordcount.items():
        if any(r["words"] != words for r in runs):
            raise RuntimeError(f"word count into {target}: counted the wrong number of words")
    result = {"sink_rows": SINK_ROWS, "executemany_rows": EXECUTEMANY_ROWS, "sink": sink, "cdc": cdc,
              "wordcount": wordcount, "words": words, "reps": reps, "interval": INTERVAL}
    result["summary"] = _summary(result)
    return result


def _summary(result: dict[str, Any]) -> str:
    s, c = result["sink"], result["cdc"]
    wc = {k: max(r["words_per_s"] for r in v) for k, v in result["wordcount"].items()}
    rows_out = {k: max(r["rows_out"] for r in v) for k, v in result["wordcount"].items()}
    lines = [
        f"**Sink, one core.** {result['sink_rows']:,} rows (bigint, text, float8) from 8 Parquet files, "
        f"in-process at parallelism 1, checkpoints every {result['interval']:g} s (best of {result['reps']}); "
        f"psycopg in one process writing the same rows (`executemany`: the first {result['executemany_rows']:,}).",
        "",
        "| Writer | Rows/s | vs psycopg COPY |",
        "|---|---:|---:|",
    ]
    for key, name in (("discard", "`ParquetSource ->` discarding sink"), ("append", "`PostgresSink` (append, COPY)"),
                      ("upsert", "`PostgresSink(key=\"id\")` (upsert)"), ("copy", "psycopg `COPY ... write_row`"),
                      ("executemany", "psycopg `executemany` INSERT")):
        lines.append(f"| {name} | {s[key]:,.0f} | {s[key] / s['copy']:.2f}× |")
    lines += [
        "",
        f"**Sink on Spark.** The word count of `sinks` over {result['words']:,} words, 2 workers, "
        f"`count(emit=\"on_checkpoint\")`, {result['interval']:g} s checkpoints (best of {result['reps']}, after a "
        "warm-up round):",
        "",
        "| Sink | Words/s | vs discard | Rows out |",
        "|---|---:|---:|---:|",
    ]
    for key, name in (("discard", "discarding"), ("append", "`PostgresSink` (append)"),
                      ("upsert", "`PostgresSink(key=\"word\")` (upsert)")):
        lines.append(f"| {name} | {wc[key]:,.0f} | {wc[key] / wc['discard'] - 1:+.1%} | {rows_out[key]:,} |")
    lines += [
        "",
        f"**CDC, one core.** {c['changes']:,} changes of one table ({c['changes'] * 10 // 11:,} inserts in "
        "transactions of 1,000 rows, then an update of every tenth row in one transaction), read from a copy "
        f"of the slot (best of {result['reps']}):",
        "",
        "| Reader | Changes/s | vs psycopg |",
        "|---|---:|---:|",
        f"| `PostgresCdcSource`'s reader (pgoutput decoded, typed Arrow batches) | {c['reader']:,.0f} | "
        f"{c['reader'] / c['psycopg']:.2f}× |",
        f"| psycopg fetching the same messages (`pg_logical_slot_get_binary_changes`, bytes only) | "
        f"{c['psycopg']:,.0f} | 1.00× |",
        f"| the job `PostgresCdcSource -> discard`, in-process, 1 s checkpoints | {c['job']:,.0f} | "
        f"{c['job'] / c['psycopg']:.2f}× |",
        "",
        "The server decodes the WAL in both; the difference is the reader's parsing of pgoutput and its Arrow "
        "conversion. The server runs with fsync off, so the sink numbers are CPU, not disk.",
    ]
    return "\n".join(lines)
