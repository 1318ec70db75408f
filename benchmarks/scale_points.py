"""One measured run of the scale benchmark (`benchmarks/scale.py`), each in a process of its own.

In-process (`inprocess_point`): the issue's word count, 200,000 lines (`flat_map(str.split)`,
`key_by`, `count(emit="on_checkpoint", combine=False)`: every word through the shuffle, as when
the issue measured it, before local-global aggregation; a sink that discards), checkpoints every 0.5 s, every
operator at one parallelism, on one thread. On Spark (`spark_point`): the same shape of job fed
slowly (`workloads.PacedSource`: a fixed number of records a second over all splits), so that the
cores are not what limits it, one worker process per subtask.

Each returns plain JSON: run time and CPU, the checkpoints read back from their manifests
(duration and its parts, files and bytes written), and what the host holds (channels, memory;
on Spark, each worker's memory and TCP links, sampled from /proc while it runs).
"""

from __future__ import annotations

import os
import resource
import shutil
import statistics
import tempfile
import threading
import time
from typing import Any

from . import workloads as w


def manifest_stats(directory: str) -> list[dict[str, Any]]:
    """Per complete checkpoint but the final one: its duration and the parts of it (`barrier`:
    trigger to the last task's state fixed; `alignment`, `sync`, `write`: the largest of a task;
    `coordinator`: the job master's CPU), and the files and bytes written into its directory."""
    from epochal.state.storage import CheckpointStorage

    storage = CheckpointStorage(directory, create=False)
    out = []
    for cid in storage.complete_checkpoints():
        m = storage.load_manifest(cid)
        if m.is_final:
            continue
        own = f"chk-{cid:08d}/"
        tasks = m.tasks
        out.append({
            "id": cid,
            "duration_ms": m.duration_ms,
            "barrier_ms": max((t.barrier_ms for t in tasks), default=0.0),
            "fanout_ms": max((t.barrier_ms - t.alignment_ms for t in tasks), default=0.0),
            "alignment_ms": max((t.alignment_ms for t in tasks), default=0.0),
            "sync_ms": max((t.sync_ms for t in tasks), default=0.0),
            "write_ms": max((t.async_ms for t in tasks), default=0.0),
            "done_ms": max((t.barrier_ms + t.sync_ms + t.async_ms for t in tasks), default=0.0),
            "coordinator_ms": m.coordinator_ms,
            "files": sum(1 for f in m.stored_files() if f.path.startswith(own)),
            "bytes": m.written_size(),
            "tasks": len(tasks),
        })
    return out


def summarise(checkpoints: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians (and the longest duration) over a run's checkpoints."""
    if not checkpoints:
        return {"checkpoints": 0}
    med = {k: statistics.median(c[k] for c in checkpoints) for k in checkpoints[0] if k not in ("id", "tasks")}
    return {"checkpoints": len(checkpoints), "duration_max_ms": max(c["duration_ms"] for c in checkpoints),
            **{f"{k}_p50": v for k, v in med.items()}}


def _rss_mb(pid: int | str = "self") -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def inprocess_point(parallelism: int, lines: int, interval: float, merge_files: bool = True,
                    max_parallelism: int | None = None) -> dict[str, Any]:
    """The word count at `parallelism` in this process; the corpus is made before the clock starts."""
    from epochal import CheckpointConfig, StreamEnvironment
    from epochal.cluster.inprocess import InProcessExecutor
    from epochal.runtime.task.wiring import channel_keys

    corpus = w.make_corpus(lines * 8)  # 8 words a line
    directory = tempfile.mkdtemp(prefix="epochal-scale-")
    try:
        env = StreamEnvironment(
            parallelism=parallelism, executor="inprocess", max_parallelism=max_parallelism or max(128, parallelism),
            checkpoint=CheckpointConfig(interval=interval, directory=directory, retain=1_000_000,
                                        merge_files=merge_files),
        )
        source = env.from_source(w.CorpusSource(corpus, parallelism, False), name="lines")
        source.flat_map(str.split).key_by(w.identity).count(emit="on_checkpoint", combine=False, name="count") \
            .sink_to(w.NullSink(), name="discard")
        job = env.job_graph(f"scale-{parallelism}")
        before = _rss_mb()
        started, cpu = time.perf_counter(), time.process_time()
        result = InProcessExecutor().execute(job)
        seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
        words = result.operator("count").records_in
        if words != lines * 8:
            raise RuntimeError(f"the count saw {words} words of {lines * 8}")
        checkpoints = manifest_stats(directory)
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        return {
            "parallelism": parallelism, "max_parallelism": job.max_parallelism, "merge_files": merge_files,
            "lines": lines, "words": words, "seconds": seconds, "cpu_s": cpu, "tasks": len(job.task_ids()),
            "channels": len(channel_keys(job)), "memory_mb": max(0.0, peak - before),
            "summary": summarise(checkpoints), "checkpoints": checkpoints,
        }
    finally:
        shutil.rmtree(directory, ignore_errors=True)


# -- on Spark -----------------------------------------------------------------------------------------


def _tcp_links(pid: int) -> int:
    """Established TCP connections of process `pid` (its sockets' inodes in /proc/net/tcp*)."""
    inodes = set()
    try:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
    except OSError:
        return 0
    links = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                next(f)
                for line in f:
                    fields = line.split()
                    if fields[3] == "01" and fields[9] in inodes:  # ESTABLISHED
                        links += 1
        except OSError:
            continue
    return links


class _WorkerSampler(threading.Thread):
    """Every half second, each worker process's RSS and TCP links (the largest seen of each)."""

    def __init__(self, executor: Any) -> None:
        super().__init__(daemon=True)
        self.executor = executor
        self.stop = threading.Event()
        self.rss: dict[int, float] = {}
        self.links: dict[int, int] = {}

    def run(self) -> None:
        while not self.stop.wait(0.5):
            for worker, pid in list(self.executor.worker_pids.items()):
                try:
                    self.rss[worker] = max(self.rss.get(worker, 0.0), _rss_mb(pid))
                except OSError:
                    continue
                self.links[worker] = max(self.links.get(worker, 0), _tcp_links(pid))


def spark_point(session: Any, parallelism: int, seconds: float, rate: int, interval: float) -> dict[str, Any]:
    """A keyed count fed `rate` records a second for `seconds`, at `parallelism` workers."""
    from epochal import CheckpointConfig, StreamEnvironment
    from epochal.cluster.spark import SparkExecutor

    records = int(rate * seconds)
    directory = tempfile.mkdtemp(prefix="epochal-scale-spark-")
    try:
        env = StreamEnvironment(
            parallelism=parallelism, spark=session, max_parallelism=max(128, parallelism),
            checkpoint=CheckpointConfig(interval=interval, directory=directory, retain=1_000_000),
        )
        env.from_source(w.PacedSource(records, parallelism, 10_000, rate), name="paced") \
            .key_by(w.first).count(emit="on_checkpoint", combine=False, name="count") \
            .sink_to(w.NullSink(), name="discard")
        job = env.job_graph(f"scale-spark-{parallelism}")
        executor = SparkExecutor(session)
        sampler = _WorkerSampler(executor)
        sampler.start()
        cpu = time.thread_time()  # the job master runs on this thread
        result = executor.execute(job)
        cpu = time.thread_time() - cpu
        sampler.stop.set()
        counted = result.operator("count").records_in
        if counted != records:
            raise RuntimeError(f"the count saw {counted} records of {records}")
        events: dict[str, float] = {}
        for name, at in executor.timeline:
            events.setdefault(name, at)
        run = events["finished"] - events["running"]
        checkpoints = manifest_stats(directory)
        return {
            "parallelism": parallelism, "records": records, "input_s": seconds, "seconds": run,
            "overhead": run / seconds - 1, "rendezvous_s": events["running"] - events["submitted"],
            "connected_s": events["connected"] - events["submitted"],
            "job_master_cpu_s": cpu, "job_master_cpu_per_s": cpu / max(run, 1e-9),
            "worker_rss_mb": statistics.median(sampler.rss.values()) if sampler.rss else None,
            "worker_rss_max_mb": max(sampler.rss.values(), default=None),
            "worker_links": max(sampler.links.values(), default=None),
            "summary": summarise(checkpoints), "checkpoints": checkpoints,
        }
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def spark_sweep(session: Any, workers: list[int], seconds: float, rate: int, interval: float) -> list[dict[str, Any]]:
    """`spark_point` at each number of workers, after a warm-up run (the executors' first job
    pays their imports)."""
    spark_point(session, min(workers), 3.0, rate, interval)
    return [spark_point(session, p, seconds, rate, interval) for p in workers]
