"""Live metrics: what every task measures, and the job-wide view the job master publishes.

Tasks count and time their own work (`TaskMetrics`): records per operator, where their time
went (busy stepping, held back by a full output, idle), their input queues and the watermark
each operator last saw. Nothing is measured per record: counters are added per batch, and the
clock is read twice per scheduling run (`Task.run_steps`). Hosts hand the latest `TaskMetrics`
of every task to the job master (in-process: read directly; on Spark: in the workers'
`Progress` messages, every `metrics_interval`, a second by default), which folds them, with the
checkpoint history and the restarts it keeps itself, into a `JobMetrics`
(`master.metrics_collector`): rates, ratios and lags are computed there, on the driver, from
two snapshots in a row. The snapshot is immutable and published into the job's `JobControl`
twice per `metrics_interval`, so the endpoint's `GET /metrics` (Prometheus), `GET /metrics.json`
and the dashboard read it without touching the job master or its tasks.

After a restart, tasks count again from the checkpoint the attempt restored (as `JobResult`
does), so per-subtask counters go down once; Prometheus's `rate()` treats that as a counter
reset.

These are the records both sides read; the exposition (Prometheus, JSON, the dashboard) lives
with the endpoint, in `cluster`.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from ..plan.job_graph import TaskId
from ..state.manifest import Manifest
from .checkpoints import AbortedCheckpoint
from .wire.handshake import Refusal
from .wire.messages import OperatorMetrics


# -- what a task reports ---------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class TaskMetrics:
    """One task's counters, as of `Task.task_metrics()` (picklable: it travels from Spark workers).

    Attributes:
        operators: records in and out, late and skipped, per operator of the task's chain.
        watermarks: per operator of the chain, the last watermark it saw (event-time seconds;
            -inf before the first, +inf once its input ended).
        busy_s: seconds spent stepping the task.
        backpressured_s: seconds it could not run because an output channel was full.
        elapsed_s: seconds since it opened; the rest of it was idle (no input, or, on a shared
            core, another task's turn).
        input_fullest: elements waiting in its fullest input channel.
        input_queued: elements waiting in all its input channels. Two numbers, not one per
            channel: a task of a keyed vertex has an input per upstream subtask, and a report
            per second from every task to the job master must not grow with the parallelism.
    """

    task: TaskId
    operators: tuple[OperatorMetrics, ...]
    watermarks: tuple[float, ...] = ()
    busy_s: float = 0.0
    backpressured_s: float = 0.0
    elapsed_s: float = 0.0
    input_fullest: int = 0
    input_queued: int = 0

    @staticmethod
    def of_counts(task: TaskId, operators: Iterable[OperatorMetrics]) -> TaskMetrics:
        """Counts only: what a host that reports no timing (an older worker) sends."""
        return TaskMetrics(task, tuple(operators))


# -- what the job master publishes -----------------------------------------------------------------
class CheckpointStatus(Enum):
    COMPLETED = "completed"
    ABORTED = "aborted"


# The share of the job master's time live metrics may take: a snapshot is O(tasks) (at 512 tasks,
# tens of ms on these cores), so at scale snapshots come less often than `metrics_interval`.
METRICS_SHARE = 0.02

@dataclass(frozen=True, slots=True)
class CheckpointRecord:
    """One checkpoint in the history: when, how long, how big, and how it ended.

    `full_bytes` is what a restore of it reads; `delta_bytes` what it wrote itself (less than
    the full size with incremental checkpoints). An aborted checkpoint has no duration or size,
    and its `reason` says why it was aborted.
    """

    checkpoint_id: int
    status: CheckpointStatus
    triggered_at: float  # seconds since the epoch (an aborted one: when it was aborted)
    duration_s: float | None = None
    alignment_s: float | None = None  # the longest alignment of any task
    full_bytes: int = 0
    delta_bytes: int = 0
    is_final: bool = False
    reason: str = ""

    @staticmethod
    def completed(manifest: Manifest) -> CheckpointRecord:
        duration = manifest.duration_ms / 1000
        return CheckpointRecord(
            manifest.checkpoint_id, CheckpointStatus.COMPLETED, manifest.created_at - duration, duration,
            max((t.alignment_ms for t in manifest.tasks), default=0.0) / 1000,
            manifest.full_size(), manifest.written_size(), manifest.is_final,
        )

    @staticmethod
    def aborted(checkpoint: AbortedCheckpoint) -> CheckpointRecord:
        reason = checkpoint.reason.value + (f": {checkpoint.detail}" if checkpoint.detail else "")
        return CheckpointRecord(checkpoint.checkpoint_id, CheckpointStatus.ABORTED, time.time(), reason=reason)


@dataclass(frozen=True, slots=True)
class RestartRecord:
    """A failed attempt: when, why, and (for a failure on a record) which operator and record."""

    attempt: int
    at: float  # seconds since the epoch
    cause: str
    operator: str | None = None
    record: str | None = None


@dataclass(frozen=True, slots=True)
class SubtaskCounts:
    """One operator's counters in one subtask."""

    subtask: int
    records_in: int
    records_out: int
    late_records: int
    skipped_records: int
    watermark: float


@dataclass(frozen=True, slots=True)
class TaskStats:
    """Where one task's time went: totals, and ratios over the last interval."""

    vertex: str
    subtask: int
    busy_s: float
    backpressured_s: float
    idle_s: float
    busy_ratio: float
    backpressured_ratio: float
    idle_ratio: float
    input_queued: int
    input_fill: float  # the fullest input channel's fill, 0 to 1


@dataclass(frozen=True, slots=True)
class OperatorStats:
    """One operator over its subtasks: totals, rates, and its task's load (the worst subtask's)."""

    name: str
    uid: str
    vertex: str
    parallelism: int
    records_in: int
    records_out: int
    in_rate: float  # records a second, over the last interval
    out_rate: float
    late_records: int
    skipped_records: int
    watermark: float  # the lowest over its subtasks (-inf: none yet)
    watermark_lag_s: float | None  # now minus the watermark, while it is finite
    busy_ratio: float
    backpressured_ratio: float
    input_fill: float
    state_bytes: int | None  # the operator's files in the last complete checkpoint
    subtasks: tuple[SubtaskCounts, ...]


@dataclass(frozen=True, slots=True)
class GraphEdge:
    """A link between two operators: `chain` inside a task, else the partitioning's kind."""

    source: str
    target: str
    kind: str


@dataclass(frozen=True, slots=True)
class SeriesPoint:
    """One point of the dashboard's charts."""

    at: float
    in_rate: float
    out_rate: float
    max_lag_s: float | None


@dataclass(frozen=True, slots=True)
class JobMetrics:
    """The job's metrics at `taken_at`: what `/metrics`, `/metrics.json` and the dashboard show."""

    job: str
    taken_at: float  # seconds since the epoch
    uptime_s: float
    attempt: int
    records_in: int  # out of the sources
    records_out: int  # into the sinks
    in_rate: float
    out_rate: float
    operators: tuple[OperatorStats, ...]
    tasks: tuple[TaskStats, ...]
    edges: tuple[GraphEdge, ...]
    checkpoints: tuple[CheckpointRecord, ...]  # the last `HISTORY`
    checkpoints_completed: int
    checkpoints_aborted: int
    restarts: tuple[RestartRecord, ...]  # the last `HISTORY`
    restart_count: int
    series: tuple[SeriesPoint, ...] = field(default=())
    links_refused: int = 0  # connections to the job's ports that failed authentication (ever)
    refused_links: tuple[Refusal, ...] = ()  # the newest of them

    @property
    def last_completed(self) -> CheckpointRecord | None:
        for record in reversed(self.checkpoints):
            if record.status is CheckpointStatus.COMPLETED:
                return record
        return None

    def operator(self, name: str) -> OperatorStats:
        for op in self.operators:
            if op.name == name:
                return op
        raise KeyError(name)

    def to_json(self) -> dict[str, Any]:
        """JSON-ready values (`GET /metrics.json`); watermarks as numbers, null before the first,
        "end" once the input ended."""
        plain: dict[str, Any] = _plain(self)
        return plain


def _plain(value: Any) -> Any:
    if isinstance(value, float):
        if value == math.inf:
            return "end"
        return None if math.isnan(value) or value == -math.inf else value
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, tuple):
        return [_plain(v) for v in value]
    if hasattr(value, "__dataclass_fields__"):
        return {name: _plain(getattr(value, name)) for name in value.__dataclass_fields__}
    return value


