"""Sources and sinks: where records enter and leave a job, exactly once.

Sources keep split positions and sinks their prepared commits as operator state (dissertation
§2.2.1, keyed state versus operator state).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ...errors import OperatorError
from ...plan.specs import SinkSpec, SourceSpec
from ..batches import batch_len
from ..elements import Batch
from .base import OperatorContext, OperatorSnapshot, RuntimeOperator, guard


@dataclass(slots=True)
class SourcePositions:
    """Operator state of a source subtask: how far each of its splits has been read."""

    positions: dict[str, Any] = field(default_factory=dict)
    finished: set[str] = field(default_factory=set)


class SourceOperator(RuntimeOperator):
    """Reads the splits of a replayable source assigned to this subtask, one after another.

    Split `i` of the source's deterministic split list belongs to subtask `i % parallelism`; a
    split's position points just past the last record handed out (dissertation §3.4:
    source state is an offset into a replayable log), so a restore rewinds exactly.
    """

    def __init__(self, spec: SourceSpec) -> None:
        super().__init__(spec)
        self.source = spec.source
        self._state = SourcePositions()
        self._splits: list[Any] = []
        self._reader: Any = None
        self._current: Any = None

    def open(self, ctx: OperatorContext) -> None:
        super().open(ctx)
        with guard(self.name, "<listing the source's splits>"):
            splits = list(self.source.splits())
        self._splits = [s for i, s in enumerate(splits) if i % ctx.parallelism == ctx.subtask]

    def restore(self, keyed: Any, states: list[Any]) -> None:
        for old in states:  # union: positions of splits this subtask now owns, whoever read them
            if old is None:
                continue
            self._state.positions.update(old.positions)
            self._state.finished |= old.finished

    @property
    def is_exhausted(self) -> bool:
        return self._reader is None and self._next_split() is None

    def _next_split(self) -> Any:
        for split in self._splits:
            if split.split_id not in self._state.finished:
                return split
        return None

    def poll(self, max_records: int) -> Batch | None:
        """The next batch, or None once every split of this subtask is exhausted."""
        while True:
            if self._reader is None:
                split = self._next_split()
                if split is None:
                    return None
                self._current = split
                with guard(self.name, f"<opening split {split.split_id}>"):
                    self._reader = self.source.open_split(split, self._state.positions.get(split.split_id))
            try:
                batch = self._reader.read(max_records)
            except OperatorError:
                raise
            except Exception as exc:
                raise OperatorError(self.name, f"<split {self._current.split_id}>", exc) from exc
            if batch is not None:
                self._state.positions[self._current.split_id] = self._reader.position()
                return batch
            self._state.finished.add(self._current.split_id)
            self._state.positions.pop(self._current.split_id, None)
            self._reader.close()
            self._reader = None

    def snapshot(self, checkpoint_id: int) -> OperatorSnapshot:
        return OperatorSnapshot(
            state=SourcePositions(dict(self._state.positions), set(self._state.finished))
        )

    def close(self) -> None:
        if self._reader is not None:
            self._reader.close()
            self._reader = None


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

