"""What a finished job reports."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..state.manifest import Manifest
from .wire.messages import OperatorMetrics


@dataclass(frozen=True, slots=True)
class CheckpointSummary:
    """One completed checkpoint, as reported to the user."""

    checkpoint_id: int
    duration_ms: float
    size: int
    max_alignment_ms: float
    max_sync_ms: float
    max_async_ms: float
    is_final: bool

    @staticmethod
    def of(manifest: Manifest) -> CheckpointSummary:
        tasks = manifest.tasks
        return CheckpointSummary(
            manifest.checkpoint_id,
            manifest.duration_ms,
            manifest.size,
            max((t.alignment_ms for t in tasks), default=0.0),
            max((t.sync_ms for t in tasks), default=0.0),
            max((t.async_ms for t in tasks), default=0.0),
            manifest.is_final,
        )


@dataclass(frozen=True, slots=True)
class JobResult:
    """The outcome of `execute()`: restarts, checkpoints, and per-operator record counts.

    Record counts are those of the last (successful) attempt, so after a restart they count
    what was processed since the checkpoint the job restarted from.
    """

    job_name: str
    restarts: int
    checkpoints: tuple[CheckpointSummary, ...]
    operators: tuple[OperatorMetrics, ...]
    failures: tuple[str, ...] = field(default=())
    restored_from: tuple[int | None, ...] = field(default=())  # per attempt: checkpoint id or None

    def operator(self, name: str) -> OperatorMetrics:
        """The metrics of the operator called `name`; raises KeyError if there is none."""
        for m in self.operators:
            if m.name == name:
                return m
        raise KeyError(name)


@dataclass(frozen=True, slots=True)
class JobProgress:
    """A live view of a running job, for progress displays."""

    records_in: int
    records_out: int
    checkpoints_completed: int
    last_checkpoint_ms: float | None
    restarts: int
    records_per_s: float = 0.0  # out of the sources, over the last interval
    watermark_lag_s: float | None = None  # the largest lag of an operator's watermark behind now
    watermark: float | None = None  # the lowest watermark of an operator (event-time seconds)
    last_checkpoint: int | None = None  # the id of the newest complete checkpoint
    job: str = ""
    state: str = "running"
    web_url: str | None = None  # the control endpoint and dashboard, when the job serves one


def merge_metrics(per_task: list[tuple[OperatorMetrics, ...]]) -> tuple[OperatorMetrics, ...]:
    """Sum per-subtask metrics by operator name, keeping first-seen order."""
    totals: dict[str, list[int]] = {}
    for metrics in per_task:
        for m in metrics:
            t = totals.setdefault(m.name, [0, 0, 0, 0])
            t[0] += m.records_in
            t[1] += m.records_out
            t[2] += m.late_records
            t[3] += m.skipped_records
    return tuple(OperatorMetrics(name, *counts) for name, counts in totals.items())
