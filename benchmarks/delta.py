"""Delta as a stream: `DeltaSource` against deltalake, pyarrow and polars reading the same files,
and Delta -> Epochal -> Delta (`DeltaSink`) beside a discarding sink.

- Readers, one core (after a warm-up run of each; pyarrow's CPU and IO pools at one thread;
  polars in a process of its own with `POLARS_MAX_THREADS=1`), best of several runs, wall
  records/s and records per CPU-second
  (`time.process_time`, every thread of the process: the machine is shared, so CPU-seconds are
  the steadier figure). Two tables of `id, user, amount, country`:
  *snapshot*, a few large versions partitioned by country, and *follow*, many small versions
  (one file each), both created with the change data feed on so that deltalake's own
  incremental reader (`load_cdf`) can read them too. Ours: `DeltaSource(path)` (the snapshot: row groups of
  the newest version) and `DeltaSource(path, follow=True, starting_version=0)` (every version's
  JSON read and its added files read, one version after the other), all splits through their
  readers in batches of 1,024 as a job reads them. Theirs: deltalake's `to_pyarrow_dataset()`
  read whole, `load_cdf(starting_version=0)` (DataFusion: it may use more than one thread, the
  CPU-seconds say), pyarrow's `read_table` of each data file (no partition columns: the floor),
  polars' `read_delta`.
- Jobs, in-process at parallelism 1, checkpoints every second: the snapshot table copied
  (`DeltaSource -> DeltaSink`) and counted per user (`key_by("user").count(emit="on_checkpoint")
  -> DeltaSink`), and the follow table followed from version 0 into the count; each beside the
  same job into a discarding sink. A followed job does not end: it is timed from its start to
  the first checkpoint completed after its last record was read, then cancelled. Outputs are
  read back with deltalake and checked.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

from .readers import source_rows
from .runner import benchmark

INTERVAL = 1.0
USERS = 50_000

_POLARS = r"""
import os, sys, time
os.environ["POLARS_MAX_THREADS"] = "1"
import polars as pl
best = None
pl.read_delta(sys.argv[1])  # a warm-up read: imports, the OS's file cache
for _ in range(int(sys.argv[2])):
    wall, cpu = time.perf_counter(), time.process_time()
    rows = pl.read_delta(sys.argv[1]).height
    took = (time.perf_counter() - wall, time.process_time() - cpu)
    best = took if best is None or took[0] < best[0] else best
print(f"RESULT {rows} {best[0]} {best[1]} {pl.thread_pool_size()}")
"""


def _rows(start: int, n: int) -> Any:
    import numpy as np
    import pyarrow as pa

    rng = np.random.default_rng(start)
    ids = np.arange(start, start + n, dtype=np.int64)
    users = pa.array([f"user{u}" for u in rng.integers(0, USERS, n)])
    countries = np.array(["de", "fr", "us", "jp", "br"])[ids % 5]
    return pa.table({"id": ids, "user": users, "amount": rng.integers(0, 100_000, n) / 100,
                     "country": countries})


def write_tables(work: str, snapshot_rows: int, versions: int, version_rows: int) -> dict[str, str]:
    """The snapshot table (4 versions, partitioned by country) and the follow table (`versions`
    versions of `version_rows` rows, one file each); the change data feed on in both."""
    from deltalake import write_deltalake

    paths = {"snapshot": os.path.join(work, "snapshot"), "follow": os.path.join(work, "follow")}
    cdf = {"delta.enableChangeDataFeed": "true"}
    for i in range(4):
        write_deltalake(paths["snapshot"], _rows(i * snapshot_rows // 4, snapshot_rows // 4),
                        partition_by=["country"], mode="append", configuration=cdf if i == 0 else None)
    for v in range(versions):
        write_deltalake(paths["follow"], _rows(v * version_rows, version_rows), mode="append",
                        configuration=cdf if v == 0 else None)
    return paths


def readers(path: str) -> dict[str, Callable[[], int]]:
    """Each reader of the table at `path`: a function giving the rows it read."""
    import pyarrow.parquet as pq
    from deltalake import DeltaTable

    from epochal.connectors import DeltaSource

    def cdf() -> int:
        return int(DeltaTable(path).load_cdf(starting_version=0).read_all().num_rows)

    return {
        "DeltaSource (snapshot)": lambda: source_rows(DeltaSource(path)),
        "DeltaSource(follow=True) from version 0": lambda: source_rows(
            DeltaSource(path, follow=True, starting_version=0)),
        "deltalake to_pyarrow_dataset": lambda: DeltaTable(path).to_pyarrow_dataset().to_table(
            use_threads=False).num_rows,
        "deltalake load_cdf from version 0": cdf,
        "pyarrow read_table of each file": lambda: sum(
            pq.read_table(f, use_threads=False).num_rows for f in DeltaTable(path).file_uris()),
    }


def measure(fn: Callable[[], int], reps: int) -> dict[str, float]:
    best: tuple[float, float] | None = None
    rows = fn()  # a warm-up run: imports, the OS's file cache
    for _ in range(reps):
        wall, cpu = time.perf_counter(), time.process_time()
        rows = fn()
        took = (time.perf_counter() - wall, time.process_time() - cpu)
        best = took if best is None or took[0] < best[0] else best
    assert best is not None
    return {"rows": rows, "seconds": best[0], "cpu_seconds": best[1], "rows_per_s": rows / best[0],
            "rows_per_cpu_s": rows / max(best[1], 1e-9)}


def polars_read(path: str, reps: int) -> dict[str, float]:
    env = dict(os.environ, POLARS_MAX_THREADS="1")
    out = subprocess.run([sys.executable, "-c", _POLARS, path, str(reps)], capture_output=True, text=True,
                         timeout=1800, env=env)
    lines = [line for line in out.stdout.splitlines() if line.startswith("RESULT ")]
    if out.returncode != 0 or not lines:
        raise RuntimeError(f"polars failed:\n{out.stderr[-3000:]}")
    rows, wall, cpu, threads = lines[-1].split()[1:]
    if threads != "1":
        raise RuntimeError(f"polars ran {threads} threads, not one")
    return {"rows": int(rows), "seconds": float(wall), "cpu_seconds": float(cpu),
            "rows_per_s": int(rows) / float(wall), "rows_per_cpu_s": int(rows) / max(float(cpu), 1e-9)}


# -- jobs -------------------------------------------------------------------------------------------
_READ = {"rows": 0, "at": 0.0, "want": -1}  # rows past the source of the running followed job


def _seen(batch: Any) -> Any:
    """Counts the rows a followed job read, noting when the last of them came (in-process)."""
    _READ["rows"] += batch.num_rows
    if _READ["rows"] >= _READ["want"] and not _READ["at"]:
        _READ["at"] = time.perf_counter()
    return batch


def run_job(path: str, work: str, shape: str, sink: str, rows: int) -> dict[str, Any]:
    """One job (`copy` or `count` of the snapshot table, `follow` of the follow table into the
    count) into `sink` (`delta` or `discard`); its output checked; records/s."""
    import pyarrow as pa
    from deltalake import DeltaTable

    from epochal import CheckpointConfig, StreamEnvironment
    from epochal.connectors import DeltaSink, DeltaSource

    from . import workloads as w

    out, ckpt = os.path.join(work, f"out-{shape}-{sink}"), os.path.join(work, f"ckpt-{shape}-{sink}")
    env = StreamEnvironment(parallelism=1, executor="inprocess",
                            checkpoint=CheckpointConfig(interval=INTERVAL, directory=ckpt))
    follow = shape == "follow"
    stream = env.from_source(DeltaSource(path, follow=follow, starting_version=0 if follow else None,
                                         poll_interval=0.1)).map_batches(_seen)
    counts = shape != "copy"
    if counts:
        stream = stream.key_by("user").count(emit="on_checkpoint")
    schema = pa.schema([("user", pa.string()), ("n", pa.int64())]) if counts else None
    stream.sink_to(DeltaSink(out, schema=schema) if sink == "delta" else w.NullSink())
    _READ.update(rows=0, at=0.0, want=rows)
    started = time.perf_counter()
    handle = env.execute_async(f"delta-{shape}-{sink}")
    if follow:
        while not _READ["at"] and not handle.done():
            time.sleep(0.01)
        read_by = handle.status().last_checkpoint or 0
        while (handle.status().last_checkpoint or 0) <= read_by and not handle.done():
            time.sleep(0.01)
        seconds = time.perf_counter() - started
        handle.cancel()
        try:
            handle.result(timeout=120)
        except Exception as exc:  # noqa: BLE001 - the cancel it was asked for
            if type(exc).__name__ != "JobCancelledError":
                raise
    else:
        handle.result(timeout=1800)
        seconds = time.perf_counter() - started
    if _READ["rows"] != rows:
        raise RuntimeError(f"{shape} into {sink}: read {_READ['rows']} rows of {rows}")
    if sink == "delta":
        table = DeltaTable(out).to_pyarrow_table()
        if counts:  # each user's last count: together every row read, once
            by_user: dict[str, int] = {}
            for user, n in zip(table.column("user").to_pylist(), table.column("n").to_pylist()):
                by_user[user] = max(by_user.get(user, 0), n)
            total = sum(by_user.values())
        else:  # every id once
            total = len(set(table.column("id").to_pylist())) if table.num_rows == rows else table.num_rows
        if total != rows:
            raise RuntimeError(f"{shape} into Delta: the output holds {total} rows' worth, not {rows}")
    return {"seconds": seconds, "rows": rows, "rows_per_s": rows / seconds}


def jobs(paths: dict[str, str], sizes: dict[str, int], work: str, reps: int) -> dict[str, dict[str, Any]]:
    """Each job into each sink, `reps` rounds (which sink first alternating), after a warm-up job."""
    run_job(paths["snapshot"], os.path.join(work, "warm-up"), "count", "discard", sizes["snapshot"])
    out: dict[str, list[float]] = {}
    for r in range(reps):
        for shape, table in (("copy", "snapshot"), ("count", "snapshot"), ("follow", "follow")):
            for sink in (("discard", "delta") if r % 2 == 0 else ("delta", "discard")):
                run = run_job(paths[table], os.path.join(work, f"job{r}"), shape, sink, sizes[table])
                out.setdefault(f"{shape}/{sink}", []).append(run["rows_per_s"])
        shutil.rmtree(os.path.join(work, f"job{r}"), ignore_errors=True)
    return {k: {"rows_per_s": max(v), "runs": v} for k, v in out.items()}


def _load() -> str:
    try:
        return subprocess.run(["uptime"], capture_output=True, text=True, timeout=10).stdout.strip()
    except OSError:
        return "load average: " + ", ".join(f"{x:.2f}" for x in os.getloadavg())


@benchmark("delta", "Delta as a stream: DeltaSource against deltalake, pyarrow and polars; Delta -> Delta")
def run(quick: bool) -> dict[str, Any]:
    import pyarrow as pa

    snapshot_rows, versions, version_rows = (100_000, 50, 200) if quick else (2_000_000, 1000, 200)
    reps = 1 if quick else 3
    work = tempfile.mkdtemp(prefix="epochal-bench-delta-")
    cpus, ios = pa.cpu_count(), pa.io_thread_count()
    load = [_load()]
    pa.set_cpu_count(1)
    pa.set_io_thread_count(1)
    try:
        paths = write_tables(work, snapshot_rows, versions, version_rows)
        sizes = {"snapshot": snapshot_rows, "follow": versions * version_rows}
        reads: dict[str, dict[str, Any]] = {}
        for table, path in paths.items():
            reads[table] = {who: measure(fn, reps) for who, fn in readers(path).items()}
            reads[table]["polars read_delta"] = polars_read(path, reps)
            wrong = {who: m["rows"] for who, m in reads[table].items() if m["rows"] != sizes[table]}
            if wrong:
                raise RuntimeError(f"{table}: readers read the wrong number of rows: {wrong}")
        load.append(_load())
        job = jobs(paths, sizes, work, max(1, reps - 1))
        load.append(_load())
    finally:
        pa.set_cpu_count(cpus)
        pa.set_io_thread_count(ios)
        shutil.rmtree(work, ignore_errors=True)
    result = {"snapshot_rows": snapshot_rows, "versions": versions, "version_rows": version_rows, "reps": reps,
              "reads": reads, "jobs": job, "interval": INTERVAL, "load": load}
    result["summary"] = _summary(result)
    return result


def _summary(result: dict[str, Any]) -> str:
    lines = [
        "Machine load (`uptime`) before, between the readers and the jobs, and after: "
        + "; ".join(f"`{x.split('load average:')[-1].strip()}`" for x in result["load"])
        + f" on {os.cpu_count()} cores shared with other work: compare within a table, not across runs.",
        "",
        f"**Readers, one core** (best of {result['reps']}). *Snapshot*: {result['snapshot_rows']:,} rows "
        "(`id, user, amount, country`) in 4 versions partitioned by country; *follow*: "
        f"{result['versions']:,} versions of {result['version_rows']} rows, one file each. Records/s wall, "
        "and per CPU-second of the process (all its threads).",
        "",
        "| Reader | snapshot rows/s | per CPU-s | vs deltalake | follow rows/s | per CPU-s | vs deltalake |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    reads = result["reads"]
    base = {t: reads[t]["deltalake to_pyarrow_dataset"]["rows_per_s"] for t in ("snapshot", "follow")}
    for who in reads["snapshot"]:
        cells = []
        for t in ("snapshot", "follow"):
            m = reads[t][who]
            cells.append(f"{m['rows_per_s']:,.0f} | {m['rows_per_cpu_s']:,.0f} | {m['rows_per_s'] / base[t]:.2f}×")
        lines.append(f"| {who} | {' | '.join(cells)} |")
    j = result["jobs"]
    lines += [
        "",
        f"**Delta -> Epochal -> Delta**, in-process at parallelism 1, checkpoints every {result['interval']:g} s "
        "(best of the runs; the followed job: from its start to the first checkpoint completed after it read "
        "the last version). Records read per second:",
        "",
        "| Job | discarding sink | `DeltaSink` | DeltaSink vs discard |",
        "|---|---:|---:|---:|",
    ]
    for shape, name in (("copy", "snapshot copied, `DeltaSource -> DeltaSink`"),
                        ("count", "snapshot counted per user, `count(emit=\"on_checkpoint\")`"),
                        ("follow", "follow table followed from version 0, counted per user")):
        d, s = j[f"{shape}/discard"]["rows_per_s"], j[f"{shape}/delta"]["rows_per_s"]
        lines.append(f"| {name} | {d:,.0f} | {s:,.0f} | {s / d - 1:+.1%} |")
    return "\n".join(lines)
