"""A loop's head: the operator at which a loop's feedback re-enters (ABS §4.3, Algorithm 2)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ...plan.specs import IterationHeadSpec
from ..wire.batches import batch_len
from .base import RuntimeOperator


@dataclass(frozen=True, slots=True)
class LoopLog:
    """Operator state of a loop head: the feedback it logged during one checkpoint (ABS §4.3)."""

    batches: tuple[Any, ...]

    @property
    def records(self) -> int:
        return sum(batch_len(b) for b in self.batches)


class IterationHeadOperator(RuntimeOperator):
    """A loop's head: passes records on; its task logs feedback during checkpoints.

    On restore it holds the logged feedback of its checkpoint in `replay`, which the task feeds
    back into the loop before any new input ("restore states, replay the loop logs, then new
    input"). Logs of old subtask j go to subtask j % parallelism, like sink commits.
    """

    def __init__(self, spec: IterationHeadSpec) -> None:
        super().__init__(spec)
        self.feedback_threshold = spec.feedback_threshold
        self.event_time = spec.event_time  # the loop holds its watermark (`runtime.task.loop_clock`)
        self.replay: list[Any] = []

    def restore(self, keyed: Any, states: list[Any]) -> None:
        for j, old in enumerate(states):
            if old is not None and j % self.ctx.parallelism == self.ctx.subtask:
                self.replay.extend(old.batches)

