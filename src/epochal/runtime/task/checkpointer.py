"""A subtask's part of a checkpoint: fix the state, write it off the processing path, acknowledge.

ABS §4.2, Algorithm 1 asks each task to snapshot its state when a barrier is aligned and to go on
at once; the dissertation (§4.5, asynchronous invocation) splits that snapshot into a
*synchronous* part that only fixes the state (copy-on-write) and an *asynchronous* part that
serialises and uploads it. The asynchronous part runs on the host's background runner (a
thread on a Spark worker, a schedulable unit in the in-process executor), which hands what it
wrote back to the task's own thread; there operators learn their written state (e.g. the file
chain an incremental backend builds on), and only then is the checkpoint acknowledged to the job
master (the prepare phase of the epoch commit, dissertation §4.1.3). Nothing crosses threads but
the immutable snapshot (read) and the immutable result (returned).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from ...config import StateConfig
from ...plan.job_graph import TaskId
from ...state.keygroups import KeyGroups
from ...state.manifest import FileHandle, TaskCheckpointStats
from ...state.storage import CheckpointStorage
from ..operators import OperatorSnapshot, RuntimeOperator
from ..wire.messages import AcknowledgeCheckpoint, DeclineCheckpoint, OperatorMetrics, OperatorSubtaskState
from .snapshots import serialise_small_snapshots, write_task_snapshot

if TYPE_CHECKING:
    from .file_merging import SnapshotMerger

log = logging.getLogger(__name__)

Snapshots = list[tuple[str, OperatorSnapshot]]


R = TypeVar("R")


class BackgroundRunner(Protocol):
    """Runs the asynchronous part of checkpoints off the processing path."""

    def submit(self, work: Callable[[], R], on_done: Callable[[R], None]) -> None:
        """Run `work` off the processing path; then call `on_done(result)` on the task's thread."""
        ...

    def read_ahead(self, work: Callable[[], R], on_done: Callable[[R], None]) -> None:
        """As `submit`, for long work that must not hold up the snapshot writes (a migration's
        read-ahead: a checkpoint written late keeps every map of the state copy-on-write)."""
        ...


@dataclass(frozen=True, slots=True)
class SnapshotWritten:
    """The asynchronous part of a checkpoint finished: what each operator's state became."""

    checkpoint_id: int
    states: tuple[OperatorSubtaskState, ...]
    stats: TaskCheckpointStats
    merged: bool = False  # into the process's merged file: acknowledged once that is in place


@dataclass(frozen=True, slots=True)
class SnapshotFailed:
    """The asynchronous part of a checkpoint failed; the checkpoint is declined."""

    checkpoint_id: int
    reason: str
    merged: bool = False


class SubtaskCheckpointer:
    """Takes, writes and acknowledges the checkpoints of one subtask.

    Args:
        task_id: the subtask, named in acknowledgements.
        task_name: for log lines.
        key_groups: the key groups this subtask owns now (a live move changes them), recorded with its state.
        storage: where state files go; None keeps checkpoints in memory only (no files).
        background: runs the asynchronous part.
        chain: the task's operators, told what was written of their state.
        send: to the job master.
        state: inline serialisation threshold and backend options.
        merger: the process's merged checkpoint files (`file_merging`); None: files of its own.
    """

    def __init__(
        self,
        task_id: TaskId,
        task_name: str,
        key_groups: Callable[[], KeyGroups],
        storage: CheckpointStorage | None,
        background: BackgroundRunner,
        chain: Sequence[RuntimeOperator],
        send: Callable[[Any], None],
        state: StateConfig,
        merger: SnapshotMerger | None = None,
    ) -> None:
        self.task_id = task_id
        self.task_name = task_name
        self.key_groups = key_groups
        self.storage = storage
        self.background = background
        self.chain = chain
        self.send = send
        self.inline_entries = state.inline_snapshot_entries
        self.is_closed = False  # results of writes that end after the task closed are dropped
        self.merger = merger if storage is not None else None
        if self.merger is not None:
            self.merger.register(task_id)
        self._barrier_ms: dict[int, float] = {}  # checkpoint → its trigger to this task's state fixed
        self._counts: dict[int, tuple[OperatorMetrics, ...]] = {}  # checkpoint id → counts at its snapshot

    def barrier_reached(self, checkpoint_id: int, since_trigger_ms: float) -> None:
        """The task fixes its state for `checkpoint_id` now, this long after the trigger (the
        barrier's way here, fan-out and alignment: checkpoint statistics)."""
        self._barrier_ms[checkpoint_id] = since_trigger_ms

    def snapshot(
        self, chain: Sequence[RuntimeOperator], checkpoint_id: int, counts: tuple[OperatorMetrics, ...] = ()
    ) -> Snapshots:
        """The synchronous part: fix every operator's state (cheap, copy-on-write). `counts`, the
        task's record counts at this point, go with the acknowledgement (`master.job_counts`)."""
        self._counts[checkpoint_id] = counts
        return [(op.uid, op.snapshot(checkpoint_id)) for op in chain]

    def serialise_small(self, snapshots: Snapshots) -> None:
        """Serialise small keyed snapshots now (after the barrier left): see `snapshots`."""
        serialise_small_snapshots(snapshots, self.inline_entries)

    def write(
        self,
        checkpoint_id: int,
        snapshots: Snapshots,
        alignment_ms: float,
        sync_ms: float,
        synchronous: bool = False,
    ) -> None:
        """The asynchronous part: write the snapshots, then report on the task's thread.

        A synchronous checkpoint (Naiad-style, `CheckpointConfig(mode="synchronous")`) writes
        before the task does anything else, into files of its own (nothing may hold it up).
        """
        storage, task_id, key_groups = self.storage, self.task_id, self.key_groups()
        barrier_ms = self._barrier_ms.pop(checkpoint_id, 0.0)
        for older in [c for c in self._barrier_ms if c < checkpoint_id]:
            del self._barrier_ms[older]  # a checkpoint not written (declined)
        merged = not synchronous and self.merger is not None and self.merger.started(checkpoint_id, task_id)
        if synchronous and self.merger is not None:
            self.merger.declined(checkpoint_id, task_id)  # its part is in files of its own
        target: Any = self.merger.sink if merged and self.merger is not None else storage

        def write() -> SnapshotWritten | SnapshotFailed:
            began = time.perf_counter()
            try:
                states, size = write_task_snapshot(target, checkpoint_id, task_id, key_groups, snapshots)
            except Exception as exc:
                return SnapshotFailed(checkpoint_id, f"writing state failed: {exc}", merged)
            async_ms = (time.perf_counter() - began) * 1000
            stats = TaskCheckpointStats(str(task_id), alignment_ms, sync_ms, async_ms, size, barrier_ms)
            return SnapshotWritten(checkpoint_id, states, stats, merged)

        if synchronous:
            self._on_result(write())
        else:
            self.background.submit(write, self._on_result)

    def _on_result(self, result: SnapshotWritten | SnapshotFailed) -> None:
        """On the task's thread: operators learn their written state, then acknowledge (or decline)."""
        if self.is_closed:
            return
        counts = self._counts.pop(result.checkpoint_id, ())
        if type(result) is SnapshotFailed:
            for op in self.chain:
                op.on_snapshot_written(result.checkpoint_id, None)
            if result.merged and self.merger is not None:
                self.merger.failed(result.checkpoint_id, self.task_id)
            log.warning("%s: checkpoint %d declined: %s", self.task_name, result.checkpoint_id, result.reason)
            self.send(DeclineCheckpoint(self.task_id, result.checkpoint_id, result.reason))
            return
        assert type(result) is SnapshotWritten
        written = {entry.uid: entry.state for entry in result.states} if self.storage is not None else {}
        for op in self.chain:
            op.on_snapshot_written(result.checkpoint_id, written.get(op.uid))
        log.debug(
            "%s: checkpoint %d written (%d bytes, %.1f ms)",
            self.task_name, result.checkpoint_id, result.stats.bytes, result.stats.async_ms,
        )
        if not result.merged or self.merger is None:
            self.send(AcknowledgeCheckpoint(self.task_id, result.checkpoint_id, result.states, result.stats,
                                            counts=counts))
            return

        def release(merged: FileHandle | None, error: str | None) -> None:  # the merged file is in place
            if self.is_closed:
                return
            if error is not None:
                self.send(DeclineCheckpoint(self.task_id, result.checkpoint_id, f"writing state failed: {error}"))
                return
            self.send(AcknowledgeCheckpoint(self.task_id, result.checkpoint_id, result.states, result.stats,
                                            () if merged is None else (merged,), counts))

        self.merger.finished(result.checkpoint_id, self.task_id, release)

    def close(self) -> None:
        if not self.is_closed and self.merger is not None:
            self.merger.unregister(self.task_id)
        self.is_closed = True

    def completed(self, checkpoint_id: int) -> None:
        """Checkpoint `checkpoint_id` completed (older ones never will)."""
        if self.merger is not None:
            self.merger.completed(checkpoint_id)

    def decline(self, checkpoint_id: int, reason: str) -> None:
        """Decline a checkpoint this subtask will not take (e.g. its alignment was abandoned)."""
        log.info("%s: checkpoint %d declined: %s", self.task_name, checkpoint_id, reason)
        if self.merger is not None:
            self.merger.declined(checkpoint_id, self.task_id)
        self._counts.pop(checkpoint_id, None)
        self.send(DeclineCheckpoint(self.task_id, checkpoint_id, reason))
