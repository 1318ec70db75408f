"""One attempt of a job, as the job master sees it: its coordinator, its loops, its outcome.

An *attempt* is one run of all of a job's tasks, from a restore (or the start) until it
finishes or fails; after a failure the job master starts the next one from the latest complete
checkpoint (dissertation §4.1.3.1, rollback recovery). Every host routes the messages its tasks
send to the job master through `Attempt.deliver`, so both hosts handle them the same way.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, Protocol

from ...errors import CheckpointError
from ...plan.job_graph import JobGraph, TaskId
from ...state.storage import CheckpointStorage
from ..checkpoints import AbortedCheckpoint, AbortReason, CompletedCheckpoint
from ..clock import Clock
from ..wire.messages import (
    AcknowledgeCheckpoint,
    DeclineCheckpoint,
    InputsEnded,
    KeyGroupsAdopted,
    KeyGroupsPrepared,
    LoopRoundEnded,
    PatchStaged,
    PoolResized,
    StateAnswer,
    TaskFinished,
)
from .coordinator import CheckpointCoordinator
from .enumerator import SplitEnumerators
from .loop_termination import LoopTermination
from .patches import PatchLog
from .pending_checkpoint import AckResult

log = logging.getLogger(__name__)


class AttemptObserver(Protocol):
    """What the job master learns from an attempt as it runs."""

    def checkpoint_completed(self, checkpoint: CompletedCheckpoint) -> None: ...
    def checkpoint_aborted(self, checkpoint: AbortedCheckpoint) -> None: ...
    def checkpoint_acknowledged(self, ack: AcknowledgeCheckpoint) -> None: ...
    def state_answered(self, answer: StateAnswer) -> None: ...
    def key_groups_adopted(self, message: KeyGroupsAdopted) -> None: ...
    def key_groups_prepared(self, message: KeyGroupsPrepared) -> None: ...
    def patch_staged(self, message: PatchStaged) -> None: ...
    def pool_resized(self, message: PoolResized) -> None: ...


class Attempt:
    """Routes the messages tasks send to the job master, for one attempt.

    A failure the attempt itself detects (too many failed checkpoints) is recorded in `failure`;
    the host checks it between steps and fails the attempt as it would for a task's error.

    Args:
        number: 1 for the first attempt of a job, counting up across restarts.
        first_checkpoint_id: ids go on across attempts, so no two attempts share one.
    """

    def __init__(
        self,
        number: int,
        job: JobGraph,
        storage: CheckpointStorage | None,
        clock: Clock,
        send: Callable[[TaskId, object], None],
        first_checkpoint_id: int,
        observer: AttemptObserver,
        enumerators: SplitEnumerators | None = None,
        patches: PatchLog | None = None,
    ) -> None:
        self.number = number
        self.observer = observer
        self.send = send  # to a task of this attempt (a state query's question)
        self.coordinator = CheckpointCoordinator(
            job, storage, clock, send, first_checkpoint_id,
            on_completed=observer.checkpoint_completed,
            on_aborted=observer.checkpoint_aborted,
            on_failure=self._fail, enumerators=enumerators, patches=patches,
        )
        self.loops = LoopTermination(job, send)
        self.finished: dict[TaskId, TaskFinished] = {}
        self.failure: BaseException | None = None
        self._tasks = len(job.task_ids())

    @property
    def is_finished(self) -> bool:
        return len(self.finished) == self._tasks

    def _fail(self, error: CheckpointError) -> None:
        if self.failure is None:
            self.failure = error

    def deliver(self, message: Any) -> None:
        kind = type(message)
        if kind is AcknowledgeCheckpoint:
            if self.coordinator.on_acknowledge(message) is AckResult.ACCEPTED:
                self.observer.checkpoint_acknowledged(message)
        elif kind is DeclineCheckpoint:
            self.coordinator.on_decline(message)
        elif kind is InputsEnded:
            self.coordinator.on_inputs_ended(message)
        elif kind is TaskFinished:
            self.finished[message.task] = message
        elif kind is LoopRoundEnded:
            self.loops.on_round(message)
        elif kind is StateAnswer:
            self.observer.state_answered(message)
        elif kind is KeyGroupsAdopted:
            self.observer.key_groups_adopted(message)
        elif kind is KeyGroupsPrepared:
            self.observer.key_groups_prepared(message)
        elif kind is PatchStaged:
            self.observer.patch_staged(message)
        elif kind is PoolResized:
            self.observer.pool_resized(message)
        else:
            raise RuntimeError(f"unexpected message from a task: {message!r}")

    def stop(self) -> None:
        """The attempt is over (failed or cancelled): abort what is pending; no new checkpoints."""
        self.coordinator.stop(AbortReason.TASK_FAILED)
