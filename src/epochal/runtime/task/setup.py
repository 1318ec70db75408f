"""What a task is given by the host that builds it (`wiring`), and the states of its life.

A host fills a `TaskSetup` per subtask; the task owns nothing else of the host's.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING, Any

from ...config import StateConfig
from ...plan.job_graph import JobVertex, TaskId
from ...state.keygroups import RoutingTable
from ...state.manifest import Manifest
from ...state.storage import CheckpointStorage
from ..clock import Clock
from .checkpointer import BackgroundRunner

if TYPE_CHECKING:
    from .file_merging import SnapshotMerger

# Steps a host lets a runnable task take in a row before the next task's turn (`run_steps`).
# One step each would move every batch on at once: queues would never hold more than one, and
# the consumer would never get a backlog to join (`InputGate`). A few in a row let it, at a
# latency of a few steps; the channel's capacity bounds the backlog either way.
STEPS_IN_A_ROW = 4


class TaskState(Enum):
    RUNNING = "running"
    DRAINING = "draining"  # a loop head whose input ended: it runs until its loop is empty
    ENDED = "ended"  # inputs ended; waits for the final checkpoint to commit
    FINISHED = "finished"


@dataclass(frozen=True, slots=True)
class TaskSetup:
    """Everything a task needs besides its channels."""

    task_id: TaskId
    vertex: JobVertex
    max_parallelism: int
    batch_size: int
    clock: Clock
    storage: CheckpointStorage | None
    restore_from: Manifest | None
    send: Callable[[Any], None]  # to the job master
    background: BackgroundRunner
    state: StateConfig = StateConfig()  # the keyed-state backend and incremental checkpoints
    unaligned: bool = False  # checkpoints overtake queued input (`CheckpointConfig(mode="unaligned")`)
    routing: RoutingTable | None = None  # who owns which key group, if not contiguous ranges
    keyed: bool = False  # records reach it by key group: a routing table places its keyed state
    merger: SnapshotMerger | None = None  # the process's merged checkpoint files (`file_merging`)
