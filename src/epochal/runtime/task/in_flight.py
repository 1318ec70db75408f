"""Snapshots that log in-flight data: a loop head's back edges, and unaligned checkpoints.

A task whose state is fixed before every input delivered the checkpoint's barrier must record
what those inputs deliver until their barrier comes: data sent before the cut, which the state
does not reflect and upstream will not send again. That log is the *channel state* of Chandy
and Lamport's snapshot, written with the task's state and replayed into the task, ahead of any
new input, on restore.

- **Loops** (ABS §4.3, Algorithm 2): a loop head snapshots when the barrier arrived on its
  regular inputs and logs its back edges until the barrier came round the loop.
- **Unaligned checkpoints** (`CheckpointConfig(mode="unaligned")`; Flink's since 1.11): under
  backpressure an aligned barrier (ABS §4.2, Algorithm 1) waits behind every full buffer on its
  way, and alignment blocks the inputs that delivered it until the slowest one does, so the
  checkpoint's duration grows with the backlog. An unaligned barrier is taken out of its input
  queue ahead of the data there (`InputChannel.take_priority_barrier`, even while the task's
  output is full); at the first barrier of a checkpoint the task snapshots its state and
  forwards the barrier at once, then logs the data the barrier overtook and whatever its other
  inputs deliver before their barrier. Exactly once still; the log is what it costs.

Limits of the unaligned mode: a log belongs to one subtask's inputs, so an unaligned checkpoint
restores only at the parallelism it was taken at (savepoints and the checkpoint a rescale takes
are aligned, so a rescale always works); the tasks of a loop align their barriers (Algorithm 2
covers their back edges).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from ...errors import CheckpointError
from ...plan.job_graph import JobVertex
from ...state.manifest import Manifest
from ...state.savepoints import storage_for
from ...state.snapshot_files import decode_operator_state
from ...state.storage import CheckpointStorage
from ..channel_state import InFlight, in_flight_uid, taken_elsewhere
from ..operators import OperatorSnapshot
from ..wire.elements import Barrier, Element, Watermark, is_batch

if TYPE_CHECKING:
    from .checkpointer import Snapshots
    from .input_gate import InputGate


@dataclass(slots=True)
class PendingSnapshot:
    """A checkpoint whose state is fixed, waiting for its barrier on the inputs in `waiting`."""

    checkpoint_id: int
    waiting: set[int]
    snapshots: Snapshots
    alignment_ms: float
    sync_ms: float
    log: list[tuple[int, Any]] = field(default_factory=list)  # (input, element), as delivered


class PendingSnapshots:
    """A task's snapshots that wait for barriers, each logging what its waiting inputs deliver."""

    def __init__(self) -> None:
        self._pending: dict[int, PendingSnapshot] = {}

    def __bool__(self) -> bool:
        return bool(self._pending)

    def __contains__(self, checkpoint_id: int) -> bool:
        return checkpoint_id in self._pending

    def hold(self, pending: PendingSnapshot) -> None:
        self._pending[pending.checkpoint_id] = pending

    def log(self, channel: int, element: Any) -> None:
        """`element` arrived on `channel`: part of every snapshot still waiting for that input."""
        for pending in self._pending.values():
            if channel in pending.waiting:
                pending.log.append((channel, element))

    def arrived(self, channel: int, checkpoint_id: int) -> PendingSnapshot | None:
        """The barrier arrived on `channel` (or the channel ended); the snapshot once complete."""
        pending = self._pending.get(checkpoint_id)
        if pending is None:
            return None
        pending.waiting.discard(channel)
        if pending.waiting:
            return None
        return self._pending.pop(checkpoint_id)

    def channel_ended(self, channel: int) -> list[PendingSnapshot]:
        """`channel` ended: it delivers no more barriers; the snapshots that are now complete."""
        done = [self.arrived(channel, cid) for cid in list(self._pending)]
        return [p for p in done if p is not None]


def read_in_flight(
    storage: CheckpointStorage | None, manifest: Manifest, vertex: JobVertex, subtask: int
) -> list[tuple[int, Element]]:
    """The in-flight log a subtask replays on restore (empty for an aligned checkpoint)."""
    op = manifest.operator(in_flight_uid(vertex))
    if op is None:
        return []
    if taken_elsewhere(op, vertex):
        raise CheckpointError(  # the job master refuses this before any task starts (`check_in_flight`)
            f"{vertex.name}: checkpoint {manifest.checkpoint_id} holds data in flight at parallelism "
            f"{op.parallelism}, not {vertex.parallelism}"
        )
    mine = [st for st in op.subtasks if st.subtask == subtask and st.operator is not None]
    if not mine:
        return []
    handle = mine[0].operator
    assert handle is not None
    state = decode_operator_state(storage_for(manifest, storage).read_file(handle), source=handle.label)
    assert isinstance(state, InFlight)
    return list(state.elements)


class Checkpointing(Protocol):
    """What an unaligned checkpoint needs of its task's checkpoints: the synchronous part of a checkpoint, and
    the write of a snapshot once its in-flight log is whole."""

    last_checkpoint: int

    def abandon_alignment(self) -> None:
        """Give up the aligned checkpoint under way (a savepoint's): a newer one overtook it."""
        ...

    def fix_state(self, barrier: Barrier) -> tuple[Snapshots, float, float]:
        """Fix every operator's state and forward the barrier; snapshots, alignment and sync ms."""
        ...

    def write(self, checkpoint_id: int, snapshots: Snapshots, alignment_ms: float, sync_ms: float) -> None:
        """Write the snapshot off the processing path and acknowledge it."""
        ...


class UnalignedBarriers:
    """A task's unaligned checkpoints: barriers taken out of the input queues ahead of the data
    before them, and the in-flight log each snapshot carries until its inputs delivered it.

    Args:
        gate: the task's inputs, where barriers jump their queues (`take_priority_barrier`).
        checkpoints: the task's checkpoints (`TaskCheckpoints`), called back for the synchronous
            part and the write.
        uid: the uid under which the vertex's in-flight logs are stored (`in_flight_uid`).
    """

    def __init__(self, gate: InputGate, checkpoints: Checkpointing, uid: str) -> None:
        self.gate = gate
        self.checkpoints = checkpoints
        self.uid = uid
        self.pending = PendingSnapshots()

    def __bool__(self) -> bool:
        return bool(self.pending)

    def take_priority_barriers(self) -> None:
        """Take every unaligned barrier out of its input queue, ahead of the data before it."""
        gate = self.gate
        for idx in gate.priority_channels():
            channel = gate.channels[idx]
            while channel.priority:
                ahead, barrier = gate.take_priority_barrier(idx)
                self._on_barrier(idx, ahead, barrier)

    def _on_barrier(self, idx: int, ahead: list[Element], barrier: Barrier) -> None:
        """The first barrier of a checkpoint fixes the state at once; `ahead` (still queued, not yet
        processed) is in flight for it, and for every snapshot still waiting on this input."""
        cid = barrier.checkpoint_id
        if cid not in self.pending and cid > self.checkpoints.last_checkpoint:
            aligner = self.gate.aligner
            if aligner.is_aligning:  # an older aligned checkpoint (a savepoint) is given up
                self.checkpoints.abandon_alignment()
            aligner.last_completed = cid
            snapshots, _, sync_ms = self.checkpoints.fix_state(barrier)
            waiting = set(aligner.regular - aligner.ended)
            self.pending.hold(PendingSnapshot(cid, waiting, snapshots, 0.0, sync_ms))
        for element in ahead:
            self.log(idx, element)
        self._done(self.pending.arrived(idx, cid))

    def log(self, idx: int, element: Element) -> None:
        """`element` arrived on input `idx`: data and watermarks are in flight for the snapshots
        still waiting for that input."""
        if self.pending and (is_batch(element) or type(element) is Watermark):
            self.pending.log(idx, element)

    def channel_ended(self, idx: int) -> None:
        for pending in self.pending.channel_ended(idx):
            self._done(pending)

    def _done(self, pending: PendingSnapshot | None) -> None:
        """Every input delivered the barrier: the snapshot goes out with its in-flight log."""
        if pending is None:
            return
        in_flight = OperatorSnapshot(state=InFlight(tuple(pending.log)) if pending.log else None)
        self.checkpoints.write(pending.checkpoint_id, [*pending.snapshots, (self.uid, in_flight)], pending.alignment_ms,
                        pending.sync_ms)
