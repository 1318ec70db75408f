"""How a checkpoint ends: completed with its manifest, or aborted with a reason.

The coordinator makes them (`master.coordinator`); the job master, the metrics and the hosts
read them. Flink's `CompletedCheckpoint` and `CheckpointFailureReason`: the end states are
frozen and carry no mutable field, and the causes of an abort are one enum.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

from ..plan.job_graph import TaskId
from ..state.manifest import Manifest
from .wire.messages import OperatorMetrics


class AbortReason(Enum):
    """Why a checkpoint was aborted."""

    EXPIRED = "expired"
    DECLINED = "declined"
    TASK_FAILED = "task_failed"
    STORAGE_FAILED = "storage_failed"
    COORDINATOR_STOPPED = "coordinator_stopped"


@dataclass(frozen=True, slots=True)
class CompletedCheckpoint:
    """A checkpoint every task prepared and whose manifest is written (if it has storage)."""

    checkpoint_id: int
    manifest: Manifest
    # each task's record counts when it fixed its state (since its attempt began; not stored):
    # what survivors had counted at a checkpoint only the lost tasks restore (`master.job_counts`)
    task_counts: dict[TaskId, tuple[OperatorMetrics, ...]] = field(default_factory=dict, compare=False)


@dataclass(frozen=True, slots=True)
class AbortedCheckpoint:
    """A checkpoint that will never complete, and why (`detail` says more where it can)."""

    checkpoint_id: int
    reason: AbortReason
    detail: str = ""
