"""A task's checkpoints as its step sees them: the synchronous part at a barrier, and what it knows.

At a barrier (aligned: ABS §4.2, Algorithm 1; unaligned or at a loop head: `in_flight`,
`loop_cut`) the task fixes every operator's state, forwards the barrier, and hands the
snapshots to its `SubtaskCheckpointer`, which writes them off the processing path (the
dissertation's synchronous and asynchronous parts, §4.5). What this type owns: the newest
checkpoint the task took (a trigger for it, or an older one, comes too late) and the newest it
knows complete (operators commit up to it, two-phase epoch commit, dissertation §4.1.3), and
the checkpoints whose alignment a newer barrier abandoned, which it declines.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from ..clock import Clock
from ..wire.elements import Barrier
from ..wire.messages import OperatorMetrics
from .chain import OperatorChain
from .checkpointer import Snapshots, SubtaskCheckpointer
from .input_gate import InputGate
from .output_gate import OutputGate
from .patching import TaskPatches


@dataclass(slots=True)
class TaskCheckpoints:
    """The synchronous part of a task's checkpoints, and the ids it took and knows complete.

    Args:
        running: whether the task still runs its chain (running or draining a loop): only then
            do operators see the barrier, and does it go downstream.
        metrics: the task's counts now, recorded with the snapshot (`job_counts`).
    """

    checkpointer: SubtaskCheckpointer
    gate: InputGate
    chain: OperatorChain
    output: OutputGate
    patches: TaskPatches
    clock: Clock
    running: Callable[[], bool]
    metrics: Callable[[], tuple[OperatorMetrics, ...]]
    last_checkpoint: int = 0
    last_notified: int = 0  # the newest checkpoint this task knows to be complete

    def restored(self, checkpoint_id: int) -> None:
        """The task restored `checkpoint_id`: complete, and taken."""
        self.last_checkpoint = self.last_notified = checkpoint_id

    def fix_state(self, barrier: Barrier) -> tuple[Snapshots, float, float]:
        """The synchronous part: fix every operator's state and forward the barrier; returns the
        snapshots, the alignment's and this part's milliseconds.

        The barrier says which checkpoint was complete when it was triggered. On Spark the
        notification of that completion travels on another connection than the barrier and may
        arrive later; acting on it first means incremental state never builds on a checkpoint
        that retention may already have dropped (and commits nothing that is not complete).
        """
        if barrier.completed > self.last_notified:
            self.notify_complete(barrier.completed)
        self.checkpointer.barrier_reached(barrier.checkpoint_id, (self.clock.now() - barrier.timestamp) * 1000)
        alignment_ms = self.gate.take_alignment_ms()
        started = time.perf_counter()
        if self.running():
            self.chain.pre_barrier(barrier.checkpoint_id)
        snapshots: Snapshots = self.checkpointer.snapshot(self.chain.operators, barrier.checkpoint_id, self.metrics())
        if barrier.patch:  # a live patch takes effect for the records after this barrier
            self.patches.switch(barrier.patch)
        # an ended task's barrier goes into loop heads still: its end of input may wait at a busy head
        self.output.broadcast(barrier, heads_only=not self.running())
        # after the barrier left: downstream aligns while this task serialises a small state
        self.checkpointer.serialise_small(snapshots)
        sync_ms = (time.perf_counter() - started) * 1000
        self.last_checkpoint = barrier.checkpoint_id
        return snapshots, alignment_ms, sync_ms

    def write(self, checkpoint_id: int, snapshots: Snapshots, alignment_ms: float, sync_ms: float,
              synchronous: bool = False) -> None:
        self.checkpointer.write(checkpoint_id, snapshots, alignment_ms, sync_ms, synchronous)

    def notify_complete(self, checkpoint_id: int) -> None:
        if checkpoint_id <= self.last_notified:
            return  # learnt from a barrier already
        self.last_notified = checkpoint_id
        self.checkpointer.completed(checkpoint_id)
        self.chain.notify_checkpoint_complete(checkpoint_id)

    def decline_abandoned(self) -> None:
        abandoned = self.gate.aligner.abandoned
        while abandoned:
            self.checkpointer.decline(abandoned.pop(), "alignment abandoned for a newer barrier")

    def abandon_alignment(self) -> None:
        """An unaligned barrier overtook the aligned checkpoint under way (a savepoint's)."""
        self.gate.aligner.abandon()
        self.gate.reset_alignment_clock()
        self.decline_abandoned()
