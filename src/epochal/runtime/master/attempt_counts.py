"""What the current attempt's record counts go on from, so that the job master reports the whole
job's (`job_counts` holds the arithmetic; this holds the state across an attempt).

An attempt counts on from the checkpoint it restored. With survivors (`master.survivors`) the
lost worker's tasks restore a newer checkpoint C mid-attempt while the others count on; the
base becomes C's counts less what the survivors had counted at C, which needs each task's counts
at C: every completed checkpoint of the attempt keeps them (`CompletedCheckpoint.task_counts`).
"""

from __future__ import annotations

from ...plan.job_graph import JobGraph, TaskId
from ...state.manifest import Manifest
from ..checkpoints import CompletedCheckpoint
from ..wire.messages import OperatorMetrics
from .job_counts import Base, base_of, less, survivors_base, whole_job

_KEPT = 8  # checkpoints whose tasks' counts are kept: survivors restore the newest that verifies


class AttemptCounts:
    """The base the attempt counts on from, and its checkpoints' counts per task."""

    def __init__(self, job: JobGraph) -> None:
        self.job = job
        self.base: Base = {}  # None: unknown (a checkpoint without counts, or lost track)
        self.started_from: int | None = None
        self._at: dict[int, dict[TaskId, tuple[OperatorMetrics, ...]]] = {}

    def attempt_started(self, restored: Manifest | None) -> Base:
        """A new attempt restores `restored` (every task): its base."""
        self.base = base_of(restored)
        self.started_from = restored.checkpoint_id if restored is not None else None
        self._at.clear()
        return self.base

    def checkpoint_completed(self, checkpoint: CompletedCheckpoint) -> None:
        self._at[checkpoint.checkpoint_id] = checkpoint.task_counts
        for old in sorted(self._at)[:-_KEPT]:
            del self._at[old]

    def survivors_restored(self, restored: Manifest | None, lost: set[int]) -> Base:
        """The tasks of workers `lost` restore `restored`, the others run on: the new base."""
        if restored is None:
            self.base = {}
        elif restored.checkpoint_id == self.started_from:  # the survivors counted nothing before it
            self.base = base_of(restored)
        elif restored.checkpoint_id in self._at:
            at = self._at[restored.checkpoint_id]
            self.base = survivors_base(self.job, base_of(restored),
                                       (c for t, c in at.items() if t.subtask not in lost))
        else:
            self.base = None
        return self.base

    def result(
        self, counted: tuple[OperatorMetrics, ...], restored: Manifest | None
    ) -> tuple[tuple[OperatorMetrics, ...], tuple[OperatorMetrics, ...]]:
        """The whole job's counts and those since `restored`, from the attempt's `counted`."""
        whole = whole_job(self.job, self.base, counted)
        since = counted if self.base is None else less(self.job, whole, base_of(restored))
        return whole, since


__all__ = ["AttemptCounts"]
