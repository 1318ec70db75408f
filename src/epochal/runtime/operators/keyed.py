"""Keyed operators: state held per key, in the key groups of the subtask (the rolling reduce here;
count, sum and the other aggregates in `operators/aggregates`).

Keyed state lives in a keyed-state backend (memory or RocksDB), cut into key groups, the unit of
snapshot, rescaling and migration (dissertation §4.4).
"""

from __future__ import annotations

from typing import Any

from ...plan.specs import KeyedReduceSpec
from ...state.backends import create_backend
from ...state.contract import KeyedStateBackend
from ...state.keygroups import KeyGroups
from ...state.manifest import SubtaskState
from ...state.sections import GroupCopies
from ..keys import batch_keys
from ..wire.elements import Batch
from .bad_records import DeadLetter, with_letters
from .base import OperatorContext, OperatorSnapshot, RuntimeOperator
from .lifecycle import UserFunctions, rich_functions


class KeyedOperator(RuntimeOperator):
    """An operator whose state is keyed, held in the key groups of its subtask."""

    def open(self, ctx: OperatorContext) -> None:
        super().open(ctx)
        self.backend: KeyedStateBackend = create_backend(
            ctx.state, ctx.key_groups, ctx.max_parallelism, f"{self.uid}-{ctx.subtask}"
        )

    def snapshot(self, checkpoint_id: int) -> OperatorSnapshot:
        return OperatorSnapshot(keyed=self.backend.snapshot(checkpoint_id), state=self.operator_state(checkpoint_id))

    def on_snapshot_written(self, checkpoint_id: int, written: SubtaskState | None) -> None:
        self.backend.on_snapshot_written(checkpoint_id, None if written is None else written.keyed_chain())

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        self.backend.notify_checkpoint_complete(checkpoint_id)

    def restore(self, keyed: dict[int, dict[str, dict[Any, Any]]] | None, states: list[Any]) -> None:
        if keyed:
            self.backend.restore(keyed)

    def reassign(self, owned: KeyGroups, gained: dict[int, dict[str, dict[Any, Any]]],
                 copies: GroupCopies | None = None) -> None:
        """Drop the key groups no longer owned, load the gained ones, then rebuild what the
        operator keeps beside its state (timer heaps, a columnar table) as a restore does: its
        `restore` with no more state."""
        self.backend.reassign(owned, gained, copies)
        self.restore({}, [])

    def query(self, key: Any) -> dict[str, Any]:
        """The live state of `key`, by state name (a state query between two batches)."""
        return self.backend.entries(key)

    def close(self) -> None:
        try:
            super().close()
        finally:
            backend = getattr(self, "backend", None)
            if backend is not None:
                backend.close()


class KeyedReduceOperator(KeyedOperator):
    """Rolling reduce per key: emits the new reduced value for every record.

    The backend folds a whole batch in one call (`reduce_into`); when the function fails on a
    record, the output so far says which, and under `skip` or `dead_letter` the fold goes on
    after it (the failed call changed no state: the value is put only once `fn` returned).
    With `emit="on_checkpoint"` the keys a batch changed are remembered instead, and each emits
    its newest value once, ahead of the checkpoint's barrier.
    """

    def __init__(self, spec: KeyedReduceSpec) -> None:
        super().__init__(spec)
        self.fn = spec.fn
        self.key = spec.key
        self.on_error = spec.on_error
        if rich := rich_functions(spec.fn):
            self.functions = UserFunctions(self.name, rich)
        self.per_epoch = spec.emit == "on_checkpoint"
        self._unemitted: dict[Any, None] = {}  # keys changed this epoch, in order

    def process(self, batch: Batch) -> Batch | None:
        records, keys, groups = batch_keys(batch, self.key, self.ctx.max_parallelism, self.name)
        out: list[Any] = []
        letters: list[DeadLetter] = []
        start = 0
        while True:
            done = len(out)
            try:
                if start:
                    records, keys, groups = records[start:], keys[start:], groups[start:]
                self.backend.reduce_into(out, "reduce", records, keys, groups, self.fn)
                if self.per_epoch:
                    self._unemitted.update(dict.fromkeys(keys))
                    return with_letters(None, letters)
                return with_letters(out, letters)
            except Exception as exc:
                failed = len(out) - done  # the index of the record that raised
                if self.per_epoch:  # the records before it changed their keys
                    self._unemitted.update(dict.fromkeys(keys[:failed]))
                self.reject(records[failed], exc, letters)  # raises under on_error=FAIL
                start = failed + 1

    def pre_barrier(self, checkpoint_id: int) -> Batch | None:
        return self._emit_changed() if self.per_epoch else None

    def end_input(self) -> Batch | None:
        return self._emit_changed() if self.per_epoch else None

    def _emit_changed(self) -> Batch | None:
        if not self._unemitted:
            return None
        backend, out = self.backend, []
        for key in self._unemitted:
            backend.set_current_key(key)
            out.append(backend.get("reduce"))
        self._unemitted = {}
        return out

    def restore(self, keyed: dict[int, dict[str, dict[Any, Any]]] | None, states: list[Any]) -> None:
        self._unemitted = {}
        super().restore(keyed, states)

