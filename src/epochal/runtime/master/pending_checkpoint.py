"""A checkpoint on the job master's side, from its trigger until it completes or is aborted.

A `PendingCheckpoint` collects the tasks' acknowledgements (the prepare phase of the two-phase
epoch commit, dissertation §4.1.3); once every task acknowledged, its manifest folds them into
one: each operator's subtask states, the merged files they lie in, and the whole job's record
counts (`job_counts`). An acknowledgement's outcome is an `AckResult`, not an error: duplicates
and late arrivals are normal in a distributed protocol. The `CheckpointCoordinator` drives them.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from enum import Enum

from ...plan.job_graph import JobGraph, TaskId
from ...state.keygroups import RoutingTable
from ...state.manifest import Manifest, OperatorState, PatchState, SplitLogState, SubtaskState
from ..channel_state import in_flight_uid
from ..checkpoints import AbortedCheckpoint, AbortReason, CompletedCheckpoint
from ..wire.messages import AcknowledgeCheckpoint
from .job_counts import Base, checkpoint_counts
from .merged_files import MergedFiles


class AckResult(Enum):
    """What an acknowledgement did: duplicates and late arrivals are normal, not errors."""

    ACCEPTED = "accepted"
    DUPLICATE = "duplicate"
    UNKNOWN_TASK = "unknown_task"
    LATE = "late"  # the checkpoint already completed or was aborted
    UNKNOWN_CHECKPOINT = "unknown_checkpoint"


@dataclass(slots=True)
class PendingCheckpoint:
    """A checkpoint collecting acknowledgements; it ends by `complete` or `abort`."""

    checkpoint_id: int
    triggered_at: float
    started_wall: float
    is_final: bool
    awaiting: set[TaskId]
    # the newest complete checkpoint when this one was triggered: its incremental state may
    # build on that one's files, so retention keeps them while this checkpoint is in flight
    based_on: int = 0
    acks: dict[TaskId, AcknowledgeCheckpoint] = field(default_factory=dict)
    split_marks: dict[str, int] = field(default_factory=dict)  # split log lengths at the trigger
    routing: RoutingTable | None = None  # the routing table from this checkpoint on
    reroutes: bool = False  # key groups move at this checkpoint (`runtime.master.migrations`)
    cpu_s: float = 0.0  # the coordinator's thread time on it so far (the job master's cost per checkpoint)
    # merged files of complete checkpoints its chains may build on (their segments, not their
    # files, are named by its acknowledgements); the coordinator's, kept up to date as checkpoints complete
    merged_files: MergedFiles = field(default_factory=MergedFiles)
    patch: int = 0  # the newest live patch its barrier carries (`runtime.patches`)

    def acknowledge(self, ack: AcknowledgeCheckpoint) -> AckResult:
        if ack.task in self.acks:
            return AckResult.DUPLICATE
        if ack.task not in self.awaiting:
            return AckResult.UNKNOWN_TASK
        self.awaiting.discard(ack.task)
        self.acks[ack.task] = ack
        return AckResult.ACCEPTED

    @property
    def is_fully_acknowledged(self) -> bool:
        return not self.awaiting

    def manifest(self, job: JobGraph, split_logs: tuple[SplitLogState, ...] = (), base: Base = None,
                 patches: tuple[PatchState, ...] = ()) -> Manifest:
        """The manifest of this checkpoint; `base`: the counts the attempt restored (`job_counts`)."""
        started = time.thread_time()
        by_uid: dict[str, list[SubtaskState]] = {}
        for ack in self.acks.values():
            for entry in ack.states:
                by_uid.setdefault(entry.uid, []).append(entry.state)
        operators = []
        for vertex in job.vertices:
            for op in vertex.chain:
                subtasks = tuple(sorted(by_uid.get(op.uid, ()), key=lambda s: s.subtask))
                operators.append(OperatorState(op.uid, vertex.parallelism, job.max_parallelism, subtasks))
            in_flight = sorted(by_uid.get(in_flight_uid(vertex), ()), key=lambda s: s.subtask)
            if any(st.operator is not None for st in in_flight):  # an unaligned checkpoint's logs
                operators.append(
                    OperatorState(in_flight_uid(vertex), vertex.parallelism, job.max_parallelism, tuple(in_flight))
                )
        return Manifest(
            checkpoint_id=self.checkpoint_id,
            job_name=job.name,
            created_at=time.time(),
            duration_ms=(time.perf_counter() - self.started_wall) * 1000,
            operators=tuple(operators),
            tasks=tuple(sorted((a.stats for a in self.acks.values()), key=lambda s: s.task)),
            is_final=self.is_final,
            split_logs=split_logs,
            routing=self.routing,
            merged=self.merged_files.listed(self.acks.values()),
            coordinator_ms=(self.cpu_s + time.thread_time() - started) * 1000,
            counts=checkpoint_counts(job, base, (a.counts for a in self.acks.values())),
            patches=patches,
        )

    def complete(self, manifest: Manifest) -> CompletedCheckpoint:
        assert self.is_fully_acknowledged, "a checkpoint completes only when every task acknowledged"
        return CompletedCheckpoint(self.checkpoint_id, manifest, {t: a.counts for t, a in self.acks.items()})

    def abort(self, reason: AbortReason, detail: str = "") -> AbortedCheckpoint:
        return AbortedCheckpoint(self.checkpoint_id, reason, detail)
