"""Keyed operators: state held per key, in the key groups of the subtask.

Keyed state lives in a keyed-state backend (memory or RocksDB), cut into key groups, the unit of
snapshot, rescaling and migration (dissertation §4.4).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from ...errors import OperatorError
from ...plan.specs import KeyedCountSpec, KeyedReduceSpec
from ...state.backends import create_backend
from ...state.contract import KeyedStateBackend, RawKeyGroupMaps
from ...state.keygroups import KeyGroups
from ...state.manifest import SubtaskState
from ...state.sections import GroupCopies
from ..key_index import KeyIndex
from ..keys import batch_keys, encode_key_column, key_groups_of_column, key_groups_of_records, record_key_fn
from ..wire.batches import to_records
from ..wire.elements import Batch
from .bad_records import DeadLetter, with_letters
from .base import OperatorContext, OperatorSnapshot, RuntimeOperator
from .columnar_count import ColumnarCounts


class KeyedOperator(RuntimeOperator):
    """An operator whose state is keyed, held in the key groups of its subtask."""

    def open(self, ctx: OperatorContext) -> None:
        super().open(ctx)
        self.backend: KeyedStateBackend = create_backend(
            ctx.state, ctx.key_groups, ctx.max_parallelism, f"{self.uid}-{ctx.subtask}"
        )

    def snapshot(self, checkpoint_id: int) -> OperatorSnapshot:
        return OperatorSnapshot(keyed=self.backend.snapshot(checkpoint_id))

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
        backend = getattr(self, "backend", None)
        if backend is not None:
            backend.close()


_COUNT = "count"
_INT16_MAX = int(np.iinfo(np.int16).max)


class KeyedCountOperator(KeyedOperator):
    """Running count per key, emitting `(key, count)` for every record.

    On an Arrow batch keyed by a column the whole update is vectorized: each distinct key's
    count moves once, in numpy (`ColumnarCounts`, on the heap backend), and each row's running
    count is the key's previous count plus the row's rank among the rows of its key, so the
    output is the same record for record as the per-record path, whatever the batch boundaries.

    With `emit="on_checkpoint"` nothing is emitted per record: the keys changed in the epoch
    emit their newest count once, ahead of the checkpoint's barrier (`pre_barrier`). The
    columnar table tracks which of its keys changed since they were last emitted, and the batch
    it emits is built from its arrays, again without a Python object per key.
    """

    def __init__(self, spec: KeyedCountSpec) -> None:
        super().__init__(spec)
        self.key = spec.key
        self._key_fn = record_key_fn(spec.key)
        self._columnar: ColumnarCounts | None = None
        self.per_epoch = spec.emit == "on_checkpoint"
        self._unemitted: dict[Any, None] = {}  # keys the per-record path changed this epoch, in order

    def process(self, batch: Batch) -> Batch | None:
        if isinstance(batch, pa.RecordBatch) and isinstance(self.key, str):
            return self._process_arrow(batch)
        self._flush_columnar(drop=True)  # records read and write the backend directly
        records = to_records(batch)
        keys, groups = key_groups_of_records(records, self._key_fn, self.ctx.max_parallelism, self.name)
        out: list[Any] = []
        try:
            self.backend.count_into(out, _COUNT, keys, groups)
        except Exception as exc:  # e.g. a restored count that is not a number
            raise OperatorError(self.name, records[len(out)], exc) from exc
        if self.per_epoch:
            self._unemitted.update(dict.fromkeys(keys))
            return None
        return out

    def _process_arrow(self, batch: pa.RecordBatch) -> pa.RecordBatch | None:
        assert isinstance(self.key, str)
        distinct, indices = encode_key_column(batch, self.key, self.name)
        per_key = np.bincount(indices, minlength=len(distinct))
        base = self._add_counts(distinct, per_key)
        if self.per_epoch:
            return None
        # The rows grouped by key, in arrival order within a key (a stable sort; numpy sorts
        # 16-bit integers by radix, in linear time: ~9x faster than int32). The p-th row of
        # that order, of key k, is row p - start[k] of its key: its count is base[k] + 1 + that.
        narrow = indices.astype(np.int16) if len(distinct) <= _INT16_MAX else indices
        order = np.argsort(narrow, kind="stable")
        offset = base + 1
        offset[1:] -= np.cumsum(per_key)[:-1]
        grouped = np.repeat(offset, per_key)
        grouped += np.arange(len(indices))
        counts = np.empty(len(indices), dtype=np.int64)
        counts[order] = grouped
        return pa.RecordBatch.from_arrays(
            [batch.column(self.key), pa.array(counts, pa.int64())], names=[self.key, "count"]
        )

    def _add_counts(self, distinct: pa.Array, per_key: np.ndarray) -> np.ndarray:
        """Add each distinct key's rows to its count; returns the counts before."""
        columnar = self._columnar
        if columnar is not None and not columnar.accepts(distinct.type):
            self._flush_columnar(drop=True)
            columnar = None
        if columnar is None and KeyIndex.supports(distinct.type) and isinstance(self.backend, RawKeyGroupMaps):
            columnar = self._columnar = ColumnarCounts(distinct.type, self.backend, _COUNT, self.per_epoch)
        if columnar is not None:
            return columnar.add(distinct, per_key)
        # other key types, and the disk backend (whose state need not fit in memory): per key
        assert isinstance(self.key, str)
        groups = key_groups_of_column(distinct, self.key, self.ctx.max_parallelism, self.name)
        base = np.empty(len(distinct), dtype=np.int64)
        backend = self.backend
        for i, (key, kg) in enumerate(zip(distinct.to_pylist(), groups.tolist())):
            backend.set_current_key(key, kg)
            previous = backend.get(_COUNT, 0)
            base[i] = previous
            backend.put(_COUNT, previous + int(per_key[i]))
        if self.per_epoch:
            self._unemitted.update(dict.fromkeys(distinct.to_pylist()))
        return base

    def _flush_columnar(self, drop: bool = False) -> None:
        if self._columnar is not None:
            self._columnar.flush()
            if drop:
                if self.per_epoch:  # the per-record path emits them from now on
                    self._unemitted.update(dict.fromkeys(self._columnar.take_unemitted()[0].to_pylist()))
                self._columnar = None

    def pre_barrier(self, checkpoint_id: int) -> Batch | None:
        return self._emit_changed() if self.per_epoch else None

    def end_input(self) -> Batch | None:
        return self._emit_changed() if self.per_epoch else None

    def _emit_changed(self) -> Batch | None:
        """The newest count of every key changed since the last emission: `(key, count)` rows."""
        columnar = self._columnar
        if not self._unemitted:
            if columnar is None:
                return None
            keys, counts = columnar.take_unemitted()
            if not len(keys):
                return None
            assert isinstance(self.key, str)
            return pa.RecordBatch.from_arrays([keys, pa.array(counts, pa.int64())], names=[self.key, "count"])
        if columnar is not None:  # both paths ran this epoch: all through the backend, once per key
            self._unemitted.update(dict.fromkeys(columnar.take_unemitted()[0].to_pylist()))
            columnar.flush()
        backend, out = self.backend, []
        for key in self._unemitted:
            backend.set_current_key(key)
            out.append((key, backend.get(_COUNT, 0)))
        self._unemitted = {}
        return out

    def query(self, key: Any) -> dict[str, Any]:
        self._flush_columnar()
        return super().query(key)

    def snapshot(self, checkpoint_id: int) -> OperatorSnapshot:
        self._flush_columnar()
        return super().snapshot(checkpoint_id)

    def restore(self, keyed: dict[int, dict[str, dict[Any, Any]]] | None, states: list[Any]) -> None:
        self._columnar = None
        self._unemitted = {}
        super().restore(keyed, states)


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

