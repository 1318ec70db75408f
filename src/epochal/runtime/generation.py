"""The job manager's side of one generation of a job: what every host does with task messages.

A generation is one run of all the job's tasks, from a restore (or the start) until it finishes
or fails. Its coordinator, its loop-termination detector and its record of finished tasks live
here, so the in-process host and the Spark host route task messages the same way.
"""

from __future__ import annotations

from typing import Any, Callable

from ..plan.job_graph import JobGraph, TaskId
from ..state.storage import CheckpointStorage
from .clock import Clock
from .coordinator import CheckpointCoordinator
from .loops import LoopTermination
from .messages import AcknowledgeCheckpoint, DeclineCheckpoint, InputsEnded, LoopRoundEnded, TaskFinished


class Generation:
    """Routes the messages tasks send to the job manager, for one generation."""

    def __init__(
        self,
        job: JobGraph,
        storage: CheckpointStorage | None,
        clock: Clock,
        send: Callable[[TaskId, object], None],
        first_checkpoint_id: int,
    ) -> None:
        self.coordinator = CheckpointCoordinator(job, storage, clock, send, first_checkpoint_id)
        self.loops = LoopTermination(job, send)
        self.finished: dict[TaskId, TaskFinished] = {}
        self._tasks = len(job.task_ids())

    @property
    def is_finished(self) -> bool:
        return len(self.finished) == self._tasks

    def deliver(self, message: Any) -> None:
        kind = type(message)
        if kind is AcknowledgeCheckpoint:
            self.coordinator.on_acknowledge(message)
        elif kind is DeclineCheckpoint:
            self.coordinator.on_decline(message)
        elif kind is InputsEnded:
            self.coordinator.on_inputs_ended(message)
        elif kind is TaskFinished:
            self.finished[message.task] = message
        elif kind is LoopRoundEnded:
            self.loops.on_round(message)
        else:
            raise RuntimeError(f"unexpected message from a task: {message!r}")
