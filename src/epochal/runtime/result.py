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
class RefusedCheckpoint:
    """A checkpoint the job master would have restored but found corrupt (`reason`), so it
    restored an older one: the epochs between the two were replayed."""

    checkpoint_id: int
    reason: str


@dataclass(frozen=True, slots=True)
class JobResult:
    """The outcome of `execute()`: restarts, checkpoints, and per-operator record counts.

    Record counts are the whole job's: a job that started from a checkpoint, or restarted from
    one, adds what it processed since (`operators_since`) to the counts the checkpoint carries
    (what the job had processed when the checkpoint was taken). With exactly-once
    checkpoints (aligned or unaligned) they are exact: each record counted once, however many
    attempts and resumes it took. `since_checkpoint` is the checkpoint the last attempt
    restored (None: it started fresh). A checkpoint written before counts were carried (an
    older manifest) has none: `counts_whole` is then False and the counts are those since it.
    `refused` lists checkpoints found corrupt and passed over for an older one.
    """

    job_name: str
    restarts: int
    checkpoints: tuple[CheckpointSummary, ...]
    operators: tuple[OperatorMetrics, ...]
    failures: tuple[str, ...] = field(default=())
    restored_from: tuple[int | None, ...] = field(default=())  # per attempt: checkpoint id or None
    operators_since: tuple[OperatorMetrics, ...] = field(default=())
    since_checkpoint: int | None = None
    counts_whole: bool = True
    refused: tuple[RefusedCheckpoint, ...] = field(default=())
    sources: tuple[str, ...] = field(default=())  # operator names: the job's input is their output
    sinks: tuple[str, ...] = field(default=())  # and its output their input

    def operator(self, name: str) -> OperatorMetrics:
        """The metrics of the operator called `name` (the whole job); raises KeyError if there is none."""
        for m in self.operators:
            if m.name == name:
                return m
        raise KeyError(name)

    @property
    def records_in(self) -> int:
        """Records out of the job's sources (the whole job)."""
        return sum(m.records_out for m in self.operators if m.name in self.sources)

    @property
    def records_out(self) -> int:
        """Records into the job's sinks (the whole job)."""
        return sum(m.records_in for m in self.operators if m.name in self.sinks)

    def summary(self) -> str:
        """The run in one line, e.g. `job 'wordcount' finished: 24,000 records in, 96,000 out
        (of which 8,000 in and 32,000 out since checkpoint 7), 9 checkpoints, 1 restart`."""
        since = ""
        if self.since_checkpoint is not None:
            new_in = sum(m.records_out for m in self.operators_since if m.name in self.sources)
            new_out = sum(m.records_in for m in self.operators_since if m.name in self.sinks)
            since = (f" (of which {new_in:,} in and {new_out:,} out since checkpoint {self.since_checkpoint})"
                     if self.counts_whole else
                     f" since checkpoint {self.since_checkpoint} (it carries no counts of the records before it)")
        restarts = f"{self.restarts} restart" + ("" if self.restarts == 1 else "s")
        checkpoints = f"{len(self.checkpoints)} checkpoint" + ("" if len(self.checkpoints) == 1 else "s")
        line = (f"job {self.job_name!r} finished: {self.records_in:,} records in, {self.records_out:,} out{since}, "
                f"{checkpoints}, {restarts}")
        if self.refused:
            line += "; " + fallback_note(self.refused, self.restored_from)
        return line


def fallback_note(refused: tuple[RefusedCheckpoint, ...], restored_from: tuple[int | None, ...]) -> str:
    """What a fallback past corrupt checkpoints means, in one clause."""
    ids = ", ".join(str(r.checkpoint_id) for r in refused)
    used = [c for c in restored_from if c is not None]
    instead = f"checkpoint {used[-1]}" if used else "a fresh start"
    return (f"checkpoint(s) {ids} refused as corrupt ({refused[0].reason}), restored from {instead} instead: "
            "their epochs were replayed")


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
