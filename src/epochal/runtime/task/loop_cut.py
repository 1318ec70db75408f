"""A loop head's checkpoint: an unaligned cut of every input, so a busy loop checkpoints on schedule.

ABS §4.3, Algorithm 2 has the head snapshot once its *regular* inputs delivered the barrier and
log its back edges until the barrier came round the loop. Two things made that slow, or stuck,
under load (issue 37: a busy halving loop completed one checkpoint in 4.8 s at a 0.3 s interval):

- the barrier on a back edge queues behind the whole feedback backlog, and on a regular input
  behind the input the head does not read while feedback piles up (the threshold rule of
  cyclic flow control, dissertation §6.4.3.2), so the cut waits for the loop to drain;
- with several head subtasks, a barrier may come round a back edge to a head that has not fixed
  its state yet (another head's barrier went round first, through a shuffle): Algorithm 2 does
  not say what that barrier means, and the old code dropped it, so the checkpoint never ended.

Here the head takes the cut *unaligned* over all its inputs, as Chandy and Lamport record a
process with channel state: every barrier into a head jumps the queue of its channel (the sender
marks it, `Barrier.at_loop_head`; the channel counts it, so taking it costs no scan), and the
first barrier of a checkpoint on any input (or the job master's trigger, once the loop's input
ended) fixes the head's state and forwards the barrier at once. A producer whose output ended
still sends its barriers into the heads (`OutputGate.broadcast(heads_only=True)`): its end of
input may wait behind data a busy head does not read, and the cut must not wait for it. From then on the head logs what
each input delivers until that input's barrier: the data still queued ahead of a barrier when it
is taken, and what is read from an input whose barrier has not come. The snapshot is the head's
state plus that log (`LoopLog`), the in-flight records of the loop at the cut and of the head's
input; on restore the head replays it into the loop before anything else. Body tasks align as
before (their inputs are bounded, so their barriers wait milliseconds). Feasibility is Chandy and
Lamport's: the log holds exactly the records sent before their sender's barrier and not
processed by the head before its own; the head only merges its inputs, so its log replays at any
subtask of the head (`IterationHeadOperator.restore`: subtask j's log goes to j % parallelism),
and a loop's checkpoints still rescale by restore. What it costs is the log: the feedback queued
at the cut, bounded by the feedback threshold while the loop does not grow.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..operators import LoopLog, OperatorSnapshot
from ..wire.batches import batch_len
from ..wire.elements import Barrier, Element, is_batch
from .checkpointer import Snapshots
from .input_gate import InputGate


class HeadCheckpointing(Protocol):
    """What a head's cut needs of its task's checkpoints: the synchronous part of a checkpoint, and the write."""

    last_checkpoint: int

    def fix_state(self, barrier: Barrier) -> tuple[Snapshots, float, float]:
        """Fix every operator's state and forward the barrier; snapshots, alignment and sync ms."""
        ...

    def write(self, checkpoint_id: int, snapshots: Snapshots, alignment_ms: float, sync_ms: float,
              synchronous: bool = False) -> None:
        """Write the snapshot (off the processing path unless `synchronous`) and acknowledge it."""
        ...


@dataclass(slots=True)
class PendingCut:
    """A checkpoint whose head state is fixed, logging the inputs in `waiting` until their barrier."""

    checkpoint_id: int
    waiting: set[int]
    snapshots: Snapshots
    sync_ms: float
    synchronous: bool
    log: list[Any] = field(default_factory=list)  # batches, in the order they were delivered
    records: int = 0


class LoopCut:
    """The head's checkpoints: barriers taken ahead of queued input, and each cut's in-flight log.

    Args:
        gate: the head's inputs, where barriers jump their queues.
        checkpoints: the head's task's checkpoints (`TaskCheckpoints`), called back for the
            synchronous part and the write.
        uid: the head operator's uid: its state in the snapshot is the log.
    """

    def __init__(self, gate: InputGate, checkpoints: HeadCheckpointing, uid: str) -> None:
        self.gate = gate
        self.checkpoints = checkpoints
        self.uid = uid
        self._pending: dict[int, PendingCut] = {}
        self.logged_records = 0  # over the task's life: what the logs cost (tests, benchmarks)

    def __bool__(self) -> bool:
        return bool(self._pending)

    def take_barriers(self) -> None:
        """Take every barrier queued on an input out of its queue, ahead of the data before it."""
        gate = self.gate
        for idx in gate.priority_channels():  # the gate knows which (it keeps their queue lengths too)
            channel = gate.channels[idx]
            while channel.priority:
                ahead, barrier = gate.take_priority_barrier(idx)
                self.on_barrier(idx, ahead, barrier)

    def on_barrier(self, idx: int, ahead: list[Element], barrier: Barrier) -> None:
        """Barrier of checkpoint n on input `idx`, `ahead` still queued before it: the first of n
        fixes the state; `ahead` is in flight for n; n is written once every input delivered it."""
        cid = barrier.checkpoint_id
        pending = self._pending.get(cid)
        if pending is None:
            if cid <= self.checkpoints.last_checkpoint:
                return  # a checkpoint fixed and written already, or given up (older than the newest)
            pending = self.fix(barrier)
        if idx in pending.waiting:
            for element in ahead:
                if is_batch(element):
                    self._append(pending, element)
            self._arrived(pending, idx)

    def fix(self, barrier: Barrier, loop_ended: bool = False) -> PendingCut:
        """Fix the head's state at checkpoint `barrier` and forward it; log every open input (none
        once the loop ended: it was proven empty, so nothing is in flight on its back edges)."""
        snapshots, _, sync_ms = self.checkpoints.fix_state(dataclasses.replace(barrier, at_loop_head=False))
        waiting = set() if loop_ended else set(range(len(self.gate.channels))) - self.gate.aligner.ended
        pending = PendingCut(barrier.checkpoint_id, waiting, snapshots, sync_ms, barrier.synchronous)
        self._pending[barrier.checkpoint_id] = pending
        self._arrived(pending, None)
        return pending

    def log(self, idx: int, element: Element) -> None:
        """`element` was read from input `idx`: in flight for every cut still waiting for that input."""
        if self._pending and is_batch(element):
            for pending in self._pending.values():
                if idx in pending.waiting:
                    self._append(pending, element)

    def channel_ended(self, idx: int) -> None:
        """Input `idx` ended: it delivers no more barriers."""
        for pending in list(self._pending.values()):
            if idx in pending.waiting:
                self._arrived(pending, idx)

    def loop_ended(self) -> None:
        """The loop was proven empty and the head ended: what the cuts wait for holds no record."""
        for pending in list(self._pending.values()):
            pending.waiting.clear()
            self._arrived(pending, None)

    def aborted(self, checkpoint_id: int) -> None:
        """The job master aborted the checkpoint: its barrier may never come round (a task of the
        loop gave up its alignment for a newer one), so its log is dropped."""
        self._pending.pop(checkpoint_id, None)

    def completed(self, checkpoint_id: int) -> None:
        """Checkpoint `checkpoint_id` is complete: older ones still logging were subsumed."""
        for older in [c for c in self._pending if c < checkpoint_id]:
            del self._pending[older]

    def _append(self, pending: PendingCut, batch: Any) -> None:
        pending.log.append(batch)
        n = batch_len(batch)
        pending.records += n
        self.logged_records += n

    def _arrived(self, pending: PendingCut, idx: int | None) -> None:
        if idx is not None:
            pending.waiting.discard(idx)
        if pending.waiting:
            return
        del self._pending[pending.checkpoint_id]
        log_state = OperatorSnapshot(state=LoopLog(tuple(pending.log)))
        snapshots = [(uid, log_state if uid == self.uid else snap) for uid, snap in pending.snapshots]
        self.checkpoints.write(pending.checkpoint_id, snapshots, 0.0, pending.sync_ms, pending.synchronous)
