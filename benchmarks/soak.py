"""Soak (issue 21): a long run at 80 % of the job's maximum throughput, 1 s checkpoints and a
worker SIGKILLed every few minutes. It asks whether anything accumulates: memory (driver, its
JVM, each worker), checkpoint durations, files in the checkpoint directory beyond retention,
staged sink files; and whether the committed output is still exact after all the kills.

    python -m benchmarks.soak --minutes 60     # the long run: results/soak.json, docs/img/soak-*.png
    python -m benchmarks.soak --minutes 2      # the smoke form: results/soak-smoke.json
    python -m benchmarks run soak [--quick]    # the same through the runner (60 or 2 minutes)

The job, on local Spark with 2 workers: a sequence-numbered source (`PacedSequence`, the
integers 0..N-1 over two splits, each record due at a fixed wall-clock time, so the input is
open-loop: a stalled or recovering job falls behind and catches up, it does not slow the
input) → `(x % KEYS, 1, x, x² mod P)` → a keyed running reduce (count, sum, sum of squares)
that emits each changed key once per checkpoint (`emit="on_checkpoint"`, so an hour of output
stays small enough to read back) → `FileSink`. The committed output is exact iff, per key, no
row is committed twice and the row with the highest count equals the key's expected
(count, sum, sum of squares): a lost record lowers the final count, a replayed one raises it,
a commit done twice repeats a row.

First the same job runs unpaced for `--probe` seconds to find its maximum throughput (records
per second once warm); the paced run then uses `--load` (0.8) of it. Every `--kill-every`
seconds a random worker gets SIGKILL. Every `--sample` seconds a sampler records RSS (from
/proc) of every process, the checkpoints completed since (from the job's metrics), the backlog
(records due minus records read), files and bytes under the checkpoint directory and in the
sink's staging area, and the load average.
"""

from __future__ import annotations

import argparse
import collections
import datetime
import json
import os
import random
import signal
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from epochal.api.connector import Source, SplitReader

from .runner import RESULTS, benchmark, machine, pyplot, save_figure

KEYS = 1024
SPLITS = 2
PRIME = 2**61 - 1  # sums of squares are kept modulo this, so they fit Arrow's int64
PAGE = os.sysconf("SC_PAGE_SIZE")


# -- the job ---------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class _Split:
    split_id: str
    index: int


class _PacedReader(SplitReader):
    """Split `s` holds the records `s, s + SPLITS, s + 2 SPLITS, ...`; its `i`-th record is due at
    `start + i / rate` (rate per split), whatever happened before: open-loop input."""

    def __init__(self, split: int, total: int, rate: float | None, start: float, position: int | None,
                 report: str | None) -> None:
        self.split, self.total, self.rate, self.start = split, total, rate, start
        self.index = position or 0
        self.report, self.reported = report, 0.0
        self._report()

    def _report(self) -> None:
        """Write the position where the sampler reads it (a benchmark probe, twice a second)."""
        if self.report is None:
            return
        self.reported = time.monotonic()
        path = f"{self.report}.{self.split}"
        with open(path + ".tmp", "w") as f:
            f.write(str(self.index))
        os.replace(path + ".tmp", path)

    def due(self) -> int:
        if self.rate is None:
            return self.total
        return min(self.total, max(0, int((time.time() - self.start) * self.rate)))

    def read(self, max_records: int) -> list[int] | None:
        if self.index >= self.total:
            return None
        end = min(self.due(), self.index + max_records)
        if end <= self.index:
            return []
        first, self.index = self.index, end
        if time.monotonic() - self.reported > 0.5:
            self._report()
        return list(range(self.split + first * SPLITS, self.split + end * SPLITS, SPLITS))

    def retry_after(self) -> float:
        if self.rate is None:
            return 0.0
        wait = self.start + (self.index + 1) / self.rate - time.time()
        return min(0.05, max(0.001, wait))

    def position(self) -> int:
        return self.index


class PacedSequence(Source):
    """The integers `0 .. SPLITS * per_split - 1`, paced at `rate` records/s in all (None: as
    fast as the job reads) from wall-clock time `start`."""

    def __init__(self, per_split: int, rate: float | None, start: float, report: str | None = None) -> None:
        self.per_split, self.rate, self.start, self.report = per_split, rate, start, report

    def due(self) -> int:
        """Records due by now, over all splits."""
        if self.rate is None:
            return SPLITS * self.per_split
        return SPLITS * min(self.per_split, max(0, int((time.time() - self.start) * self.rate / SPLITS)))

    def read_positions(self) -> int | None:
        """Records read by now, over all splits, as the readers last reported (None: not yet)."""
        try:
            total = 0
            for i in range(SPLITS):
                with open(f"{self.report}.{i}") as f:
                    total += int(f.read())
            return total
        except (OSError, ValueError, TypeError):
            return None

    def splits(self) -> Sequence[_Split]:
        return [_Split(f"seq-{i}", i) for i in range(SPLITS)]

    def open_split(self, split: Any, position: Any | None) -> SplitReader:
        rate = None if self.rate is None else self.rate / SPLITS
        return _PacedReader(split.index, self.per_split, rate, self.start, position, self.report)


def _row(x: int) -> tuple[int, int, int, int]:
    return (x % KEYS, 1, x, x * x % PRIME)


def _merge(a: Any, b: Any) -> tuple[int, int, int, int]:
    return (a[0], a[1] + b[1], a[2] + b[2], (a[3] + b[3]) % PRIME)


def _key(row: Any) -> int:
    return int(row[0])


def soak_job(spark: Any, source: PacedSequence, out: str, ckpt: str, name: str) -> Any:
    from epochal import CheckpointConfig, RestartStrategy, StreamEnvironment
    from epochal.connectors import FileSink

    env = StreamEnvironment(
        parallelism=2, spark=spark, batch_size=1024,
        checkpoint=CheckpointConfig(interval=1.0, directory=ckpt, retain=3, timeout=60.0),
        restart=RestartStrategy(max_restarts=1000),
    )
    rows = env.from_source(source).map(_row)
    rows.key_by(_key).reduce(_merge, emit="on_checkpoint").sink_to(FileSink(out))
    return env.job_graph(name)


def _ship() -> None:
    """Let Spark workers unpickle this module's source and functions without importing it."""
    from pyspark import cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules[__name__])


# -- probes of the machine -------------------------------------------------------------------------
def rss_mb(pid: int) -> float | None:
    """Resident memory of a process in MiB (from /proc), None once it is gone."""
    try:
        with open(f"/proc/{pid}/statm") as f:
            return int(f.read().split()[1]) * PAGE / 2**20
    except (OSError, IndexError, ValueError):
        return None


def children(pid: int) -> list[int]:
    """Direct child processes of `pid`."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            if parent(int(entry)) == pid:
                found.append(int(entry))
    return found


def parent(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return None


def command(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def jvm_pid() -> int | None:
    """The driver's JVM: the java child of this process (PySpark's gateway)."""
    for pid in children(os.getpid()):
        if "java" in command(pid).split(" ", 1)[0]:
            return pid
    return None


@dataclass(frozen=True, slots=True)
class Tree:
    """Files and bytes under a directory; `staging`: the hidden ones (a FileSink's `.part-*`)."""

    files: int
    bytes: int
    staging: int
    staging_bytes: int
    checkpoints: int  # `chk-*` directories

    @staticmethod
    def of(root: str) -> Tree:
        files = size = staging = staging_bytes = checkpoints = 0
        for directory, dirs, names in os.walk(root):
            if directory == root:
                checkpoints = sum(d.startswith("chk-") for d in dirs)
            for name in names:
                try:
                    n = os.stat(os.path.join(directory, name)).st_size
                except OSError:
                    continue  # deleted meanwhile
                files, size = files + 1, size + n
                if name.startswith("."):
                    staging, staging_bytes = staging + 1, staging_bytes + n
        return Tree(files, size, staging, staging_bytes, checkpoints)


# -- the run ---------------------------------------------------------------------------------------
@dataclass(slots=True)
class Sample:
    t: float  # seconds since the paced run started
    rss_mb: dict[str, float]
    worker_pids: dict[str, int]
    records_read: int  # the source readers' positions (a restore moves them back)
    backlog: int  # records due minus records read
    restarts: int
    checkpoint_dir: Tree
    sink_dir: Tree
    load: tuple[float, float, float]


@dataclass(slots=True)
class Run:
    """Everything the paced run observed."""

    samples: list[Sample] = field(default_factory=list)
    checkpoints: dict[int, dict[str, Any]] = field(default_factory=dict)  # id -> the metrics' record
    kills: list[dict[str, Any]] = field(default_factory=list)


def _observe(executor: Any, control: Any, source: PacedSequence, out: str, ckpt: str, t0: float,
             run: Run) -> None:
    metrics = control.metrics()
    if metrics is not None:
        for record in metrics.checkpoints:
            if record.checkpoint_id not in run.checkpoints:
                run.checkpoints[record.checkpoint_id] = {
                    "id": record.checkpoint_id, "status": record.status.value,
                    "t": record.triggered_at - t0, "duration_s": record.duration_s,
                    "alignment_s": record.alignment_s, "full_bytes": record.full_bytes, "reason": record.reason,
                }
    rss: dict[str, float] = {}
    for name, pid in [("driver", os.getpid()), ("driver JVM", jvm_pid())]:
        value = rss_mb(pid) if pid is not None else None
        if value is not None:
            rss[name] = value
    pids = {f"worker {w}": pid for w, pid in sorted(executor.worker_pids.items())}
    for name, pid in pids.items():
        value = rss_mb(pid)
        if value is not None:
            rss[name] = value
    for pid in {parent(p) for p in pids.values()} - {jvm_pid(), None}:
        value = rss_mb(pid) if pid is not None else None
        if value is not None:
            rss["pyspark daemon"] = value
    read = source.read_positions()
    run.samples.append(Sample(
        time.time() - t0, rss, pids, read or 0, source.due() - (read or 0), control.status().restarts,
        Tree.of(ckpt), Tree.of(out), os.getloadavg(),
    ))
    last = run.samples[-1]
    with open(os.path.join(os.path.dirname(ckpt), "samples.jsonl"), "a") as f:  # to watch a long run
        f.write(json.dumps(asdict(last)) + "\n")


def _start(spark: Any, graph: Any) -> tuple[Any, Any, threading.Thread, dict[str, BaseException]]:
    from epochal.cluster.spark import SparkExecutor
    from epochal.runtime.master.control import JobControl

    executor, control = SparkExecutor(spark), JobControl(graph.name, 2)
    outcome: dict[str, BaseException] = {}

    def execute() -> None:
        try:
            executor.execute(graph, None, control)
        except BaseException as exc:  # noqa: BLE001 - looked at by the caller
            outcome["error"] = exc

    thread = threading.Thread(target=execute, name="soak-job", daemon=True)
    thread.start()
    deadline = time.monotonic() + 180
    while len(executor.worker_pids) < 2 and thread.is_alive():
        if time.monotonic() > deadline:
            raise RuntimeError("the workers did not start within 180 s")
        time.sleep(0.05)
    return executor, control, thread, outcome


def probe_max(spark: Any, directory: str, seconds: float) -> dict[str, Any]:
    """The unpaced job's throughput after a warm-up of 10 s: the median over 10 s windows of
    `seconds` (records/s read), not the mean, so that a lull in the machine's other work does
    not set the pace of the whole hour (a first attempt paced at 80 % of a lull's rate fell
    behind at once)."""
    source = PacedSequence(10**12, None, time.time())
    graph = soak_job(spark, source, os.path.join(directory, "probe-out"), os.path.join(directory, "probe-ckpt"),
                     "soak-probe")
    _, control, thread, outcome = _start(spark, graph)
    points: list[tuple[float, int]] = []
    try:
        end = time.monotonic() + 10 + seconds
        while time.monotonic() < end and thread.is_alive():
            time.sleep(1.0)
            metrics = control.metrics()
            if metrics is not None:
                points.append((time.monotonic(), metrics.records_in))
    finally:
        control.request_cancel()
        thread.join(timeout=120)
    if outcome.get("error") is not None and type(outcome["error"]).__name__ != "JobCancelledError":
        raise outcome["error"]
    start = points[0][0] + 10
    steady = [p for p in points if p[0] >= start]
    if len(steady) < 2:
        raise RuntimeError(f"the probe saw too few metrics: {points}")
    (ta, ra), (tb, rb) = steady[0], steady[-1]
    rates: list[tuple[float, float]] = []
    for (t1, r1) in steady:
        later = [(t2, r2) for t2, r2 in steady if t2 >= t1 + 10]
        if later and (not rates or t1 >= rates[-1][0] + 10):
            rates.append((t1, (later[0][1] - r1) / (later[0][0] - t1)))
    window_rates = [r for _, r in rates] or [(rb - ra) / (tb - ta)]
    return {"seconds": tb - ta, "records": rb - ra, "mean_records_per_s": (rb - ra) / (tb - ta),
            "window_records_per_s": window_rates, "records_per_s": statistics.median(window_rates),
            "restarts": control.status().restarts}


def paced_run(spark: Any, directory: str, rate: float, minutes: float, kill_every: float, sample_every: float,
              seed: int) -> tuple[Run, PacedSequence, str, str, dict[str, Any]]:
    out, ckpt = os.path.join(directory, "out"), os.path.join(directory, "ckpt")
    per_split = int(rate * minutes * 60 / SPLITS)
    source = PacedSequence(per_split, rate, time.time() + 6.0,  # about a warm stage's start-up
                           os.path.join(directory, "position"))
    t0 = source.start
    graph = soak_job(spark, source, out, ckpt, "soak")
    executor, control, thread, outcome = _start(spark, graph)
    run, rng = Run(), random.Random(seed)
    next_kill, next_sample = t0 + kill_every, time.time()
    deadline, cancelled = t0 + minutes * 60 * 1.25 + 120, False  # a job that cannot keep up is stopped
    while thread.is_alive():
        now = time.time()
        if now > deadline and not cancelled:
            print("[soak] past the deadline: cancelling", file=sys.stderr)
            cancelled = control.request_cancel()
        if now >= next_sample:
            _observe(executor, control, source, out, ckpt, t0, run)
            next_sample += sample_every
        if now >= next_kill and now < t0 + minutes * 60 - 20:  # no kill in the last 20 s
            pids = dict(executor.worker_pids)
            worker = rng.choice(sorted(pids))
            try:
                os.kill(pids[worker], signal.SIGKILL)
                run.kills.append({"t": now - t0, "worker": worker, "pid": pids[worker]})
                print(f"[soak] {now - t0:7.1f} s: SIGKILL worker {worker} (pid {pids[worker]})", file=sys.stderr)
            except ProcessLookupError:
                pass
            next_kill += kill_every
        thread.join(timeout=0.2)
    _observe(executor, control, source, out, ckpt, t0, run)
    if outcome.get("error") is not None and not cancelled:
        raise outcome["error"]
    ended = {
        "seconds": time.time() - t0, "cancelled_at_deadline": cancelled, "restarts": control.status().restarts,
        "recovery_s": list(executor.recovery_seconds),
    }
    return run, source, out, ckpt, ended


# -- the checks ------------------------------------------------------------------------------------
def expected(key: int, n: int) -> tuple[int, int, int]:
    """Count, sum and sum of squares (mod PRIME) of `x = key + KEYS j < n`: in closed form, since
    an hour holds a billion records."""
    c = (n - key + KEYS - 1) // KEYS
    total = c * key + KEYS * c * (c - 1) // 2
    squares = c * key * key + key * KEYS * c * (c - 1) + KEYS * KEYS * (c - 1) * c * (2 * c - 1) // 6
    return c, total, squares % PRIME


def check_output(out: str, source: PacedSequence) -> dict[str, int]:
    """Lost, duplicated and unexpected in the committed output (see the module docstring)."""
    from epochal.connectors import read_committed

    n = SPLITS * source.per_split
    want = {k: expected(k, n) for k in range(min(KEYS, n))}
    rows = collections.Counter(tuple(r) for r in read_committed(out))
    final: dict[int, tuple[int, ...]] = {}
    lost = duplicated = unexpected = 0
    for row, times in rows.items():
        duplicated += times - 1
        key = row[0]
        if key not in want:
            unexpected += times
        elif key not in final or row[1] > final[key][1]:
            final[key] = row
    for key, (count, total, squares) in want.items():
        got = final.get(key)
        if got is None:
            lost += count
        elif got[1] < count:
            lost += count - got[1]
        elif got[1] > count:
            duplicated += got[1] - count
        elif (got[2], got[3]) != (total, squares):
            unexpected += 1  # the right count of the wrong records
    return {"records": n, "rows": sum(rows.values()), "lost": lost, "duplicated": duplicated,
            "unexpected": unexpected}


def check_retention(ckpt: str, retain: int) -> dict[str, Any]:
    """The checkpoint directory holds `retain` complete checkpoints and only their files."""
    from epochal.state.manifest import Manifest
    from epochal.state.storage import MANIFEST_NAME

    complete = sorted(d for d in os.listdir(ckpt) if os.path.exists(os.path.join(ckpt, d, MANIFEST_NAME)))
    referenced: set[str] = set()
    for d in complete:
        with open(os.path.join(ckpt, d, MANIFEST_NAME), "rb") as f:
            manifest = Manifest.from_json(f.read(), d)
        referenced.update(h.path for h in manifest.files())
        referenced.add(f"{d}/{MANIFEST_NAME}")
    on_disk = {os.path.relpath(os.path.join(a, n), ckpt) for a, _, names in os.walk(ckpt) for n in names}
    directories = sorted(d for d in os.listdir(ckpt) if os.path.isdir(os.path.join(ckpt, d)))
    return {
        "complete": complete, "directories": directories, "files": len(on_disk),
        "unreferenced": sorted(on_disk - referenced), "missing": sorted(referenced - on_disk),
        "ok": len(complete) == retain and on_disk == referenced and directories == complete,
    }


# -- figures ---------------------------------------------------------------------------------------
def windows(run: Run, minutes: float, width_s: float) -> list[dict[str, Any]]:
    """Checkpoint durations per window of `width_s` seconds: count, median, p99, max; aborts."""
    out = []
    for start in range(0, int(minutes * 60), int(width_s)):
        of = [c for c in run.checkpoints.values() if start <= c["t"] < start + width_s]
        done = sorted(c["duration_s"] for c in of if c["status"] == "completed" and c["duration_s"] is not None)
        out.append({
            "from_min": start / 60, "to_min": (start + width_s) / 60, "completed": len(done),
            "aborted": sum(c["status"] == "aborted" for c in of),
            "median_s": statistics.median(done) if done else None,
            "p99_s": done[min(len(done) - 1, int(0.99 * len(done)))] if done else None,
            "max_s": done[-1] if done else None,
        })
    return out


def slope(points: list[tuple[float, float]]) -> float | None:
    """Least-squares slope of (seconds, MiB) points, in MiB per hour."""
    if len(points) < 3:
        return None
    mt = statistics.fmean(t for t, _ in points)
    mv = statistics.fmean(v for _, v in points)
    den = sum((t - mt) ** 2 for t, _ in points)
    return None if den == 0 else 3600 * sum((t - mt) * (v - mv) for t, v in points) / den


def memory(run: Run) -> dict[str, dict[str, Any]]:
    """Per process: RSS at the first and last sample it is in (after the first minute), its
    max, its trend (MiB/hour, least squares), what one kill adds (RSS a minute after each kill
    minus just before it) and, for workers, the last RSS of each incarnation (a kill relaunches
    both workers as new processes)."""
    names = sorted({n for s in run.samples for n in s.rss_mb})
    figures: dict[str, dict[str, Any]] = {}
    for name in names:
        seen = [(s.t, s.rss_mb[name], s.worker_pids.get(name)) for s in run.samples if name in s.rss_mb]
        warm = [x for x in seen if x[0] >= 60] or seen
        pids = list(dict.fromkeys(p for _, _, p in seen if p is not None))
        per_kill = []
        for kill in run.kills:
            before = [v for t, v, _ in seen if t < kill["t"]]
            after = [v for t, v, _ in seen if t >= kill["t"] + 60]
            if before and after:
                per_kill.append(after[0] - before[-1])
        figures[name] = {
            "start_mb": warm[0][1], "end_mb": warm[-1][1], "max_mb": max(v for _, v, _ in seen),
            "slope_mb_per_hour": slope([(t, v) for t, v, _ in warm]),
            "per_kill_mb": per_kill, "processes": max(1, len(pids)),
            "incarnation_end_mb": [[v for _, v, p in seen if p == pid][-1] for pid in pids],
        }
    return figures


def plot(run: Run, minutes: float, suffix: str) -> list[str]:
    plt = pyplot()
    if plt is None:
        return []
    kills = [k["t"] / 60 for k in run.kills]

    def mark(ax: Any) -> None:
        for i, t in enumerate(kills):
            ax.axvline(t, color="#C44E52", lw=0.8, ls="--", label="worker SIGKILL" if i == 0 else None)

    names = []
    fig, ax = plt.subplots(figsize=(7.5, 3.6))
    for name in sorted({n for s in run.samples for n in s.rss_mb}):
        pts = [(s.t / 60, s.rss_mb[name]) for s in run.samples if name in s.rss_mb]
        ax.plot([p[0] for p in pts], [p[1] for p in pts], lw=1.1, label=name)
    mark(ax)
    ax.set_xlabel("minutes")
    ax.set_ylabel("RSS, MiB")
    ax.set_title("Soak: resident memory per process")
    ax.legend(fontsize=7, ncol=3)
    fig.tight_layout()
    names.append(f"soak-memory{suffix}.png")
    save_figure(fig, names[-1])

    fig, ax = plt.subplots(figsize=(7.5, 3.6))
    done = sorted((c["t"] / 60, c["duration_s"]) for c in run.checkpoints.values() if c["duration_s"] is not None)
    ax.scatter([d[0] for d in done], [d[1] for d in done], s=2, color="#4C72B0", label="checkpoint duration")
    aborted = [c["t"] / 60 for c in run.checkpoints.values() if c["status"] == "aborted"]
    if aborted:
        ax.scatter(aborted, [0] * len(aborted), marker="x", color="#C44E52", s=12, label="aborted")
    win = windows(run, minutes, 60)
    ax.plot([(w["from_min"] + w["to_min"]) / 2 for w in win if w["median_s"] is not None],
            [w["median_s"] for w in win if w["median_s"] is not None], color="k", lw=1.2, label="median per minute")
    mark(ax)
    ax.set_yscale("log")
    ax.set_xlabel("minutes")
    ax.set_ylabel("seconds (log)")
    ax.set_title("Soak: duration of every completed checkpoint")
    ax.legend(fontsize=7)
    fig.tight_layout()
    names.append(f"soak-checkpoints{suffix}.png")
    save_figure(fig, names[-1])

    fig, (top, bottom) = plt.subplots(2, 1, figsize=(7.5, 4.6), sharex=True)
    ts = [s.t / 60 for s in run.samples]
    top.plot(ts, [s.checkpoint_dir.files for s in run.samples], label="files in the checkpoint dir")
    top.plot(ts, [s.checkpoint_dir.checkpoints for s in run.samples], label="chk-* directories")
    top.plot(ts, [s.sink_dir.staging for s in run.samples], label="sink staging files")
    mark(top)
    top.set_ylabel("files")
    top.legend(fontsize=7)
    top.set_title("Soak: files left behind, and backlog")
    bottom.plot(ts, [s.backlog for s in run.samples], color="#55A868", label="backlog (records due, not read)")
    mark(bottom)
    bottom.set_xlabel("minutes")
    bottom.set_ylabel("records")
    bottom.legend(fontsize=7)
    fig.tight_layout()
    names.append(f"soak-files{suffix}.png")
    save_figure(fig, names[-1])
    return names


# -- the benchmark ---------------------------------------------------------------------------------
def soak(minutes: float, probe_s: float = 60.0, load: float = 0.8, kill_every: float | None = None,
         sample_every: float = 5.0, seed: int = 21) -> dict[str, Any]:
    import epochal
    from epochal.cluster.spark import create_session

    kill_every = kill_every if kill_every is not None else min(300.0, minutes * 60 / 3)
    suffix = "" if minutes >= 60 else "-smoke"
    print(f"[soak] epochal from {epochal.__file__}", file=sys.stderr)
    spark = create_session("local[2]")
    _ship()
    directory = tempfile.mkdtemp(prefix="epochal-soak-")
    try:
        probe = probe_max(spark, directory, probe_s)
        rate = load * probe["records_per_s"]
        print(f"[soak] max {probe['records_per_s']:,.0f} records/s; paced at {rate:,.0f}", file=sys.stderr)
        run, source, out, ckpt, ended = paced_run(spark, directory, rate, minutes, kill_every, sample_every, seed)
    finally:
        spark.stop()
    output = check_output(out, source)
    retention = check_retention(ckpt, 3)
    result: dict[str, Any] = {
        "host": "spark local[2], 2 workers", "minutes": minutes, "load": load, "probe": probe,
        "rate_records_per_s": rate, "records": SPLITS * source.per_split, "keys": KEYS,
        "kill_every_s": kill_every, "sample_every_s": sample_every, "ended": ended,
        "kills": run.kills, "output": output, "retention": retention,
        "memory": memory(run), "windows_10min": windows(run, minutes, 600 if minutes >= 30 else 60),
        "checkpoints": sorted(run.checkpoints.values(), key=lambda c: c["id"]),
        "samples": [asdict(s) for s in run.samples],
        "load_average": {
            "median_1min": statistics.median(s.load[0] for s in run.samples),
            "max_1min": max(s.load[0] for s in run.samples),
        },
        "epochal": epochal.__file__,
    }
    result["images"] = plot(run, minutes, suffix)
    result["summary"] = summary(result)
    return result


def _f(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def summary(result: dict[str, Any]) -> str:
    out, ret, probe = result["output"], result["retention"], result["probe"]
    done = [c for c in result["checkpoints"] if c["status"] == "completed"]
    lines = [
        f"A stateful job on Spark `local[2]` (2 workers; source → map → keyed reduce over {result['keys']} keys, "
        "one update per changed key per checkpoint → FileSink), 1 s checkpoints, `retain=3`. Unpaced it read "
        f"**{probe['records_per_s']:,.0f} records/s** (the median of 10 s windows over {probe['seconds']:.0f} s "
        f"after a 10 s warm-up; mean {probe['mean_records_per_s']:,.0f}); "
        f"the soak ran paced at {result['load']:.0%} of that, **{result['rate_records_per_s']:,.0f} records/s**, "
        f"for {result['minutes']:g} minutes ({result['records']:,} records), with a random worker SIGKILLed "
        f"every {result['kill_every_s']:.0f} s. Load average (1 min) median "
        f"{result['load_average']['median_1min']:.2f}, max {result['load_average']['max_1min']:.2f} on "
        f"{os.cpu_count()} cores shared with other work.",
        "",
        "| process | RSS at 1 min, MiB | at the end | max | trend, MiB/h | per kill, MiB (median) | processes |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for name, m in result["memory"].items():
        kill = statistics.median(m["per_kill_mb"]) if m["per_kill_mb"] and m["processes"] == 1 else None
        lines.append(f"| {name} | {m['start_mb']:.0f} | {m['end_mb']:.0f} | {m['max_mb']:.0f} | "
                     f"{_f(m['slope_mb_per_hour'], 1)} | {_f(kill, 1)} | {m['processes']} |")
    lines += [
        "",
        "| window (min) | checkpoints | aborted | median s | p99 s | max s |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for w in result["windows_10min"]:
        lines.append(f"| {w['from_min']:.0f}–{w['to_min']:.0f} | {w['completed']} | {w['aborted']} | "
                     f"{_f(w['median_s'], 3)} | {_f(w['p99_s'], 3)} | {_f(w['max_s'], 3)} |")
    files = [s["checkpoint_dir"]["files"] for s in result["samples"]]
    backlog = [s["backlog"] / result["rate_records_per_s"] for s in result["samples"] if s["t"] > 0]
    recov = result["ended"]["recovery_s"]
    median_recovery = statistics.median(recov) if recov else None
    lines += [
        "",
        f"{len(done)} checkpoints completed, {len(result['checkpoints']) - len(done)} aborted. "
        f"Kills: {len(result['kills'])}; restarts: {result['ended']['restarts']}; recoveries "
        f"{len(recov)} (median {_f(median_recovery)} s, max {_f(max(recov, default=None))} s). "
        f"Files in the checkpoint directory: min {min(files)}, median {statistics.median(files):.0f}, "
        f"max {max(files)}; at the end {ret['files']} in {len(ret['directories'])} directories, "
        f"{len(ret['unreferenced'])} not referenced by a retained checkpoint "
        f"({'only the retained checkpoints' if ret['ok'] else 'NOT only the retained checkpoints'}). "
        f"Backlog (records due but not yet read, in seconds of input): median {statistics.median(backlog):.1f} s, "
        f"max {max(backlog):.1f} s, at the last sample {backlog[-1]:.1f} s. "
        f"Committed output: {out['rows']:,} rows; lost {out['lost']}, duplicated {out['duplicated']}, "
        f"unexpected {out['unexpected']}.",
        "",
        *(f"![soak](img/{name})" for name in result["images"]),
    ]
    return "\n".join(lines) + "\n"


@benchmark("soak", "Soak: an hour at 80 % of maximum throughput, 1 s checkpoints, a worker killed every 5 min")
def run_benchmark(quick: bool) -> dict[str, Any]:
    return soak(2 if quick else 60, probe_s=20 if quick else 60)


def replot(path: str) -> dict[str, Any]:
    """Recompute the figures, plots and summary of a result file from its samples (same data)."""
    with open(path) as f:
        result: dict[str, Any] = json.load(f)
    run = Run(kills=result["kills"], checkpoints={c["id"]: c for c in result["checkpoints"]})
    for sample in result["samples"]:
        fields = dict(sample, checkpoint_dir=Tree(**sample["checkpoint_dir"]), sink_dir=Tree(**sample["sink_dir"]),
                      load=tuple(sample["load"]))
        run.samples.append(Sample(**fields))
    minutes = result["minutes"]
    result["memory"] = memory(run)
    result["windows_10min"] = windows(run, minutes, 600 if minutes >= 30 else 60)
    result["images"] = plot(run, minutes, "" if minutes >= 60 else "-smoke")
    result["summary"] = summary(result)
    with open(path, "w") as f:
        json.dump(result, f, indent=1, sort_keys=True)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.soak", description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=60)
    parser.add_argument("--probe", type=float, help="seconds of the unpaced probe (60; 20 under 10 minutes)")
    parser.add_argument("--load", type=float, default=0.8, help="fraction of the probed maximum")
    parser.add_argument("--kill-every", type=float, help="seconds between kills (300, at most a third of the run)")
    parser.add_argument("--sample", type=float, default=5.0, help="seconds between samples")
    parser.add_argument("--seed", type=int, default=21)
    parser.add_argument("--replot", metavar="JSON", help="only redo the figures and plots of a result file")
    args = parser.parse_args(argv)
    if args.replot:
        print(replot(args.replot)["summary"])
        return 0
    probe = args.probe if args.probe is not None else (60 if args.minutes >= 10 else 20)
    started = datetime.datetime.now(datetime.UTC)
    result = soak(args.minutes, probe, args.load, args.kill_every, args.sample, args.seed)
    result.update(name="soak", title="Soak", quick=args.minutes < 60, machine=machine(),
                  started=started.isoformat(timespec="seconds"))
    os.makedirs(RESULTS, exist_ok=True)
    name = "soak.json" if args.minutes >= 60 else "soak-smoke.json"
    with open(os.path.join(RESULTS, name), "w") as f:
        json.dump(result, f, indent=1, sort_keys=True)
    print(result["summary"])
    bad = result["output"]["lost"] + result["output"]["duplicated"] + result["output"]["unexpected"]
    return 1 if bad or not result["retention"]["ok"] else 0


if __name__ == "__main__":
    sys.exit(main())
