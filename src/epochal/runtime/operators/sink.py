"""Sinks: where records leave a job, exactly once (dissertation §4.1.3, two-phase epoch commit).

A sink keeps its prepared commits as operator state (dissertation §2.2.1, keyed state versus
operator state): what a checkpoint sealed is committed when that checkpoint completes, or on
restore if the commit was cut short.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from ...errors import OperatorError
from ...plan.specs import SinkSpec
from ..wire.batches import batch_len
from ..wire.elements import Batch
from .base import OperatorContext, OperatorSnapshot, RuntimeOperator, guard


@dataclass(slots=True)
class SinkCommits:
    """Operator state of a sink subtask: its prepared commits by checkpoint, its writer's lineage
    (`SinkWriter.set_lineage`), and the checkpoint it was snapshotted for."""

    pending: dict[int, Any]
    lineage: str
    checkpoint_id: int


def new_lineage() -> str:
    return uuid.uuid4().hex[:16]


class SinkOperator(RuntimeOperator):
    """Writes to a sink in two phases (dissertation §4.1.3, two-phase epoch commit).

    Pre-commit at a checkpoint: the writer seals what it wrote since the last one into a
    *committable*, kept as operator state. Commit on the coordinator's notification that the
    checkpoint is complete. Committables found in restored state belong to a complete checkpoint
    and are committed on restore, so commits cut short by a failure are finished, once.

    The state also keeps the writer's *lineage* (`SinkWriter.set_lineage`): what a sink
    idempotent per epoch names its commits by, with the subtask and the checkpoint id. It goes
    on across restores and starts anew on a fresh start, or when checkpoint ids begin again
    below the restored one (a savepoint adopted into new storage), so that (lineage, subtask,
    id) never names two different epochs, except an epoch the job master replays at its cut.
    A savepoint adopted into a job's storage (renumbered) begins a new lineage too: the run that
    took it may have gone on and committed epochs under the ids the new run takes.
    """

    def __init__(self, spec: SinkSpec) -> None:
        super().__init__(spec)
        self.sink = spec.sink
        self._pending: dict[int, Any] = {}
        self._writer: Any = None
        self._lineage = new_lineage()
        self._restored_at = 0  # the checkpoint the state was restored from (0: none)

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
        if checkpoint_id <= self._restored_at:  # ids began again (an adopted savepoint): a new run
            self._restored_at = 0
            self._set_lineage(new_lineage())
        with guard(self.name, f"<preparing the commit of checkpoint {checkpoint_id}>"):
            committable = self._writer.prepare_commit(checkpoint_id)
        if committable is not None:
            self._pending[checkpoint_id] = committable
        if not self._pending and self._ignores_lineage():
            return OperatorSnapshot(state=None)  # nothing to keep: no file (restore takes None as none)
        return OperatorSnapshot(state=SinkCommits(dict(self._pending), self._lineage, checkpoint_id))

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
        # (A state of before lineages is the dict of its commits.)
        subtask, parallelism = self.ctx.subtask, self.ctx.parallelism
        mine = [
            c
            for j, old in enumerate(states)
            if old and j % parallelism == subtask
            for _, c in sorted((old.pending if isinstance(old, SinkCommits) else old).items())
        ]
        own = states[subtask] if subtask < len(states) else None
        restored = self.ctx.restored_checkpoint
        if isinstance(own, SinkCommits) and (restored is None or own.checkpoint_id == restored):
            self._lineage = own.lineage  # else a savepoint adopted under another id: a new run
        self._restored_at = max((s.checkpoint_id for s in states if isinstance(s, SinkCommits)), default=0)
        self._set_lineage(self._lineage)
        with guard(self.name, "<committing restored checkpoints>"):
            if mine:
                self.sink.commit(mine)
            self._writer.recover()

    def _ignores_lineage(self) -> bool:
        """The writer has no `set_lineage` of its own: nothing needs its lineage kept."""
        method = getattr(self._writer, "set_lineage", None)
        return method is None or getattr(method, "ignored", False)

    def _set_lineage(self, lineage: str) -> None:
        self._lineage = lineage
        if hasattr(self._writer, "set_lineage"):
            with guard(self.name, "<setting the writer's lineage>"):
                self._writer.set_lineage(lineage)

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
