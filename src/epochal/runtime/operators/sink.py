"""Sinks: where records leave a job, exactly once (dissertation §4.1.3, two-phase epoch commit).

A sink keeps its prepared commits as operator state (dissertation §2.2.1, keyed state versus
operator state): what a checkpoint sealed is committed when that checkpoint completes, or on
restore if the commit was cut short.
"""

from __future__ import annotations

from typing import Any

from ...errors import OperatorError
from ...plan.specs import SinkSpec
from ..wire.batches import batch_len
from ..wire.elements import Batch
from .base import OperatorContext, OperatorSnapshot, RuntimeOperator, guard


class SinkOperator(RuntimeOperator):
    """Writes to a sink in two phases (dissertation §4.1.3, two-phase epoch commit).

    Pre-commit at a checkpoint: the writer seals what it wrote since the last one into a
    *committable*, kept as operator state. Commit on the coordinator's notification that the
    checkpoint is complete. Committables found in restored state belong to a complete checkpoint
    and are committed on restore, so commits cut short by a failure are finished, once.
    """

    def __init__(self, spec: SinkSpec) -> None:
        super().__init__(spec)
        self.sink = spec.sink
        self._pending: dict[int, Any] = {}
        self._writer: Any = None

    def open(self, ctx: OperatorContext) -> None:
        super().open(ctx)
        with guard(self.name, "<creating the writer>"):
            self._writer = self.sink.create_writer(ctx.subtask, ctx.parallelism)

    def process(self, batch: Batch) -> None:
        try:
            self._writer.write(batch)
        except Exception as exc:
            raise OperatorError(self.name, f"<batch of {batch_len(batch)} records>", exc) from exc
        return None

    def snapshot(self, checkpoint_id: int) -> OperatorSnapshot:
        with guard(self.name, f"<preparing the commit of checkpoint {checkpoint_id}>"):
            committable = self._writer.prepare_commit(checkpoint_id)
        if committable is not None:
            self._pending[checkpoint_id] = committable
        # nothing pending: no state, and no file (restore treats None and {} alike)
        return OperatorSnapshot(state=dict(self._pending) if self._pending else None)

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        ready = [cid for cid in sorted(self._pending) if cid <= checkpoint_id]
        if ready:
            with guard(self.name, f"<committing checkpoint(s) {ready}>"):
                self.sink.commit([self._pending[cid] for cid in ready])
            for cid in ready:
                del self._pending[cid]

    def restore(self, keyed: Any, states: list[Any]) -> None:
        # Old subtask j's commits go to subtask j % parallelism: the same subtask when the
        # parallelism is unchanged, so no other subtask touches its staged data meanwhile.
        mine = [
            c
            for j, old in enumerate(states)
            if old and j % self.ctx.parallelism == self.ctx.subtask
            for _, c in sorted(old.items())
        ]
        with guard(self.name, "<committing restored checkpoints>"):
            if mine:
                self.sink.commit(mine)
            self._writer.recover()

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
