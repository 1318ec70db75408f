"""The job master's metrics collector: the tasks' counters folded into an immutable `JobMetrics`.

Hosts hand the latest `TaskMetrics` of every task to the job master (in-process: read directly;
on Spark: in the workers' `Progress` messages, every `metrics_interval`), which folds them, with
the checkpoint history and the restarts it keeps itself, into a `JobMetrics` (`snapshot`):
rates, ratios and lags are computed here, on the driver, from two snapshots in a row. The
records themselves are in `runtime.metrics`, which the endpoint reads.
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass

from ...plan.job_graph import JobGraph, TaskId
from ...plan.specs import SinkSpec, SourceSpec
from ...state.manifest import Manifest
from ..checkpoints import AbortedCheckpoint
from ..metrics import (
    CheckpointRecord,
    GraphEdge,
    JobMetrics,
    OperatorStats,
    RestartRecord,
    SeriesPoint,
    SubtaskCounts,
    TaskMetrics,
    TaskStats,
)
from ..wire.handshake import Refusals
from ..wire.messages import OperatorMetrics

HISTORY = 100  # checkpoints and restarts kept for the dashboard (counts go on past it)
SERIES = 600  # points of the throughput and lag series (five minutes at two a second)


@dataclass(slots=True)
class _Previous:
    """The last snapshot's totals, for rates and ratios over the interval since."""

    at: float
    records: dict[str, tuple[int, int]]
    times: dict[TaskId, tuple[float, float, float]]
    job: tuple[int, int]


class MetricsCollector:
    """Folds the tasks' metrics, the checkpoint history and the restarts into `JobMetrics`.

    Lives on the job master; nothing in it is shared with another thread (the snapshot it
    returns is immutable).

    Args:
        job: the job graph (its operators and edges).
        previous: the last snapshot of an earlier job master of the same job (before a
            rescale relaunched it): its checkpoint history, restarts and uptime go on.
    """

    def __init__(self, job: JobGraph, previous: JobMetrics | None = None) -> None:
        self.job = job
        self.started = time.monotonic() - (previous.uptime_s if previous is not None else 0.0)
        self._ops = [(v, i, op) for v in job.vertices for i, op in enumerate(v.chain)]
        self._sources = {op.name for _, _, op in self._ops if isinstance(op, SourceSpec)}
        self._sinks = {op.name for _, _, op in self._ops if isinstance(op, SinkSpec)}
        self.edges = _edges(job)
        self.checkpoints: deque[CheckpointRecord] = deque(maxlen=HISTORY)
        self.completed = 0
        self.aborted = 0
        self.restarts: deque[RestartRecord] = deque(maxlen=HISTORY)
        self.restart_count = 0
        self.state_bytes: dict[str, int] = {}  # by operator uid, from the last manifest
        self.tasks: dict[TaskId, TaskMetrics] = {}  # the latest of every task of this attempt
        self.series: deque[SeriesPoint] = deque(maxlen=SERIES)
        self._previous: _Previous | None = None
        self.refusals: Refusals | None = None  # the job's (`JobControl.refusals`), set by the job master
        if previous is not None:
            self.checkpoints.extend(previous.checkpoints)
            self.completed, self.aborted = previous.checkpoints_completed, previous.checkpoints_aborted
            self.restarts.extend(previous.restarts)
            self.restart_count = previous.restart_count
            self.series.extend(previous.series)
            self.state_bytes = {op.uid: op.state_bytes for op in previous.operators if op.state_bytes is not None}

    # -- events --------------------------------------------------------------------------------
    def checkpoint_completed(self, manifest: Manifest) -> None:
        self.checkpoints.append(CheckpointRecord.completed(manifest))
        self.completed += 1
        self.state_bytes = {
            op.uid: sum(h.size for st in op.subtasks for h in (*st.keyed_chain(), st.operator) if h is not None)
            for op in manifest.operators
        }

    def checkpoint_aborted(self, checkpoint: AbortedCheckpoint) -> None:
        self.checkpoints.append(CheckpointRecord.aborted(checkpoint))
        self.aborted += 1

    def attempt_failed(self, attempt: int, cause: BaseException) -> None:
        operator = record = None
        for _ in range(8):  # the task's error may be wrapped by the host
            if cause.__cause__ is None or hasattr(cause, "operator"):
                break
            cause = cause.__cause__
        if hasattr(cause, "operator"):
            operator = str(cause.operator)
            record = repr(getattr(cause, "record", None))[:200]
        self.restarts.append(RestartRecord(attempt, time.time(), f"{type(cause).__name__}: {cause}", operator, record))
        self.restart_count += 1

    def attempt_started(self) -> None:
        """Counters start again from the restored checkpoint: forget the last attempt's."""
        self.tasks = {}

    # -- the snapshot --------------------------------------------------------------------------
    def snapshot(self, tasks: Iterable[TaskMetrics], attempt: int) -> JobMetrics:
        """The job's metrics now, from the latest metrics of its tasks."""
        for t in tasks:
            self.tasks[t.task] = t
        now, wall = time.monotonic(), time.time()
        prev = self._previous
        dt = now - prev.at if prev is not None else 0.0
        capacity = self.job.config.channel_capacity
        task_stats: dict[TaskId, TaskStats] = {}
        times: dict[TaskId, tuple[float, float, float]] = {}
        for tid, t in self.tasks.items():
            times[tid] = (t.busy_s, t.backpressured_s, t.elapsed_s)
            task_stats[tid] = _task_stats(self.job, t, prev.times.get(tid) if prev else None, capacity)
        records: dict[str, tuple[int, int]] = {}
        operators = []
        for vertex, index_in_chain, spec in self._ops:
            subtasks, stats = [], []
            for sub in range(vertex.parallelism):
                tid = TaskId(vertex.id, sub)
                if tid in task_stats:
                    stats.append(task_stats[tid])
                reported = self.tasks.get(tid)
                if reported is None or index_in_chain >= len(reported.operators):
                    continue
                m = reported.operators[index_in_chain]
                marks = reported.watermarks
                wm = marks[index_in_chain] if index_in_chain < len(marks) else -math.inf
                subtasks.append(SubtaskCounts(sub, m.records_in, m.records_out, m.late_records, m.skipped_records, wm))
            rin, rout = sum(s.records_in for s in subtasks), sum(s.records_out for s in subtasks)
            records[spec.name] = (rin, rout)
            before = prev.records.get(spec.name, (0, 0)) if prev is not None else (0, 0)
            watermark = min((s.watermark for s in subtasks), default=-math.inf)
            operators.append(OperatorStats(
                spec.name, spec.uid, vertex.name, vertex.parallelism, rin, rout,
                _rate(rin, before[0], dt), _rate(rout, before[1], dt),
                sum(s.late_records for s in subtasks), sum(s.skipped_records for s in subtasks),
                watermark, wall - watermark if math.isfinite(watermark) else None,
                max((s.busy_ratio for s in stats), default=0.0),
                max((s.backpressured_ratio for s in stats), default=0.0),
                max((s.input_fill for s in stats), default=0.0),
                self.state_bytes.get(spec.uid), tuple(subtasks),
            ))
        job_in = sum(r[1] for name, r in records.items() if name in self._sources)
        job_out = sum(r[0] for name, r in records.items() if name in self._sinks)
        in_rate = _rate(job_in, prev.job[0], dt) if prev is not None else 0.0
        out_rate = _rate(job_out, prev.job[1], dt) if prev is not None else 0.0
        lags = [op.watermark_lag_s for op in operators if op.watermark_lag_s is not None]
        if prev is not None:
            self.series.append(SeriesPoint(wall, in_rate, out_rate, max(lags) if lags else None))
        self._previous = _Previous(now, records, times, (job_in, job_out))
        return JobMetrics(
            self.job.name, wall, now - self.started, attempt, job_in, job_out, in_rate, out_rate,
            tuple(operators), tuple(task_stats.values()), self.edges, tuple(self.checkpoints),
            self.completed, self.aborted, tuple(self.restarts), self.restart_count, tuple(self.series),
            *((self.refusals.count, self.refusals.recent()) if self.refusals is not None else ()),
        )

    def finished(self, final: dict[TaskId, tuple[OperatorMetrics, ...]], attempt: int) -> JobMetrics:
        """The last snapshot: the tasks' final counts (from their `TaskFinished`) over the live ones."""
        for tid, ops in final.items():
            known = self.tasks.get(tid)
            self.tasks[tid] = TaskMetrics.of_counts(tid, ops) if known is None else _with_counts(known, ops)
        return self.snapshot((), attempt)


def _with_counts(t: TaskMetrics, operators: tuple[OperatorMetrics, ...]) -> TaskMetrics:
    return TaskMetrics(t.task, operators, t.watermarks, t.busy_s, t.backpressured_s, t.elapsed_s, t.input_fullest,
                       t.input_queued)


def _rate(now: int, before: int, dt: float) -> float:
    if dt <= 0:
        return 0.0
    return max(now - before, now if now < before else 0) / dt  # fewer than before: a restart


def _task_stats(
    job: JobGraph, t: TaskMetrics, before: tuple[float, float, float] | None, capacity: int
) -> TaskStats:
    busy, held, elapsed = t.busy_s, t.backpressured_s, t.elapsed_s
    if before is not None and elapsed > before[2]:  # over the interval since the last snapshot
        d_busy, d_held, d_elapsed = busy - before[0], held - before[1], elapsed - before[2]
    else:  # the first snapshot of this task (or the same one again): since it opened
        d_busy, d_held, d_elapsed = busy, held, elapsed
    busy_ratio = _ratio(d_busy, d_elapsed)
    held_ratio = min(_ratio(d_held, d_elapsed), 1.0 - busy_ratio)
    fill = min(1.0, t.input_fullest / capacity) if capacity > 0 else 0.0
    return TaskStats(
        job.vertex(t.task.vertex).name, t.task.subtask, busy, held, max(0.0, elapsed - busy - held),
        busy_ratio, held_ratio, max(0.0, 1.0 - busy_ratio - held_ratio) if d_elapsed > 0 else 0.0,
        t.input_queued, fill,
    )


def _ratio(part: float, whole: float) -> float:
    return min(1.0, max(0.0, part / whole)) if whole > 0 else 0.0


def _edges(job: JobGraph) -> tuple[GraphEdge, ...]:
    edges: list[GraphEdge] = []
    for v in job.vertices:
        edges.extend(GraphEdge(a.name, b.name, "chain") for a, b in zip(v.chain, v.chain[1:]))
    for e in job.edges:
        kind = e.partitioning.kind.value + (" (loop)" if e.is_back_edge else "")
        edges.append(GraphEdge(job.vertex(e.source).chain[-1].name, job.vertex(e.target).chain[0].name, kind))
    return tuple(edges)
