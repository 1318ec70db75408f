"""The keyed aggregate operator: count, sum, min, max, mean and aggregate functions per key.

Two paths, one state. Arrow batches keyed by a column (string, binary or integer keys, numeric
values, the in-memory backend) take the columnar path: the batch is grouped once (dictionary
encoding), each aggregate's partials come out of numpy per distinct key, and they merge into the
rows of an `AggregateTable` (`TableState`: kept in keyed state one `GroupTable` per key group).
Everything else takes the per-key path: keys and key groups per record, the backend's fused
fold (`reduce_into`, `count_into`), one Python partial per key and state.

What it emits: `(key, result, ...)` per record (`emit="per_record"`), or per key changed in the
epoch, once, ahead of the checkpoint's barrier (`emit="on_checkpoint"`); on the columnar path a
batch with the key column and one column per aggregate. Behind a local phase
(`spec.combined`) the input is partials, merged instead of folded: one row per key and epoch of
each upstream subtask instead of one per record (`plan.local_global`).
"""

from __future__ import annotations

import operator
from collections import Counter
from typing import Any

import numpy as np
import pyarrow as pa

from ....errors import OperatorError
from ....plan.aggregates import AggregateKind, KeyedAggregateSpec, is_batch_function, state_names
from ....plan.specs import OnError
from ....state.contract import RawKeyGroupMaps
from ...key_index import KeyIndex, carried_hashes
from ...keys import batch_keys, encode_key_column, key_column, record_key_fn
from ...wire.batches import to_arrow, to_records
from ...wire.elements import Batch
from ..bad_records import DeadLetter, with_letters
from ..base import OperatorSnapshot
from ..keyed import KeyedOperator
from .functions import (
    Accumulators,
    BatchAggregate,
    arrow_column,
    arrow_values,
    batch_aggregate,
    grouped,
    record_aggregate,
    record_values,
    row_selector,
    value_of,
)
from .local import FROM_RECORDS
from .scan import group_order, running
from .table import labels_of
from .table_state import TableState

_ABSENT = object()


class KeyedAggregateOperator(KeyedOperator):
    """Aggregates per key; see the module docstring."""

    def __init__(self, spec: KeyedAggregateSpec) -> None:
        super().__init__(spec)
        self.key = spec.key
        self.column = key_column(spec.key)
        self.calls = spec.aggregates
        self.combined = spec.combined
        self.per_epoch = spec.emit == "on_checkpoint"
        self.on_error = spec.on_error
        self.states = state_names(self.calls)
        self.outputs = [c.name for c in self.calls]
        self.batch_only = any(c.kind is AggregateKind.AGGREGATE and is_batch_function(c.function) for c in self.calls)
        batch = [batch_aggregate(c) for c in self.calls]
        self.batch: list[BatchAggregate] | None = None if any(b is None for b in batch) else batch  # type: ignore[assignment]
        self.records = None if self.batch_only else [record_aggregate(c) for c in self.calls]
        self.labels = labels_of(self.batch) if self.batch is not None else []
        self._count_only = len(self.calls) == 1 and self.calls[0].kind is AggregateKind.COUNT
        self._unemitted: dict[Any, int] = {}  # keys the per-key path changed this epoch -> key group
        self._records_out = False  # records came last: emit records (tuples), not Arrow
        self.tables: TableState | None = None

    def open(self, ctx: Any) -> None:
        super().open(ctx)
        # the table holds its state in memory: the disk backend keeps state per key instead
        # (it need not fit in memory), unless the aggregate only runs on batches
        if self.batch is not None and (isinstance(self.backend, RawKeyGroupMaps) or self.batch_only):
            self.tables = TableState(self.backend, self.batch, self.states, self.per_epoch)

    # -- records in -----------------------------------------------------------------------------
    def process(self, batch: Batch) -> Batch | None:
        if type(batch) is pa.RecordBatch and self.column is not None and self._columnar(batch):
            # partials a local phase made of records: records out, as if they had come as tuples
            self._records_out = self.combined and _from_records(batch)
            out = self._process_table(batch, self.column, self.combined)
            return _records(out) if self._records_out and isinstance(out, pa.RecordBatch) else out
        if self.batch_only:
            self._records_out = False
            return self._process_table(*self._as_arrow(batch), False)
        self._records_out = True
        partials = self._as_partials(batch)
        if partials is not None:
            out = self._process_table(partials, partials.schema.names[0], True)
            return _records(out) if out is not None else None
        return self._process_records(batch)

    def _as_partials(self, batch: Batch) -> pa.RecordBatch | None:
        """Records as an Arrow batch of partials, for the table, where that is cheap and exact:
        behind a local phase (a few rows per key and epoch) or for a count once per epoch (one
        row per key of the batch); keys of one type the table holds, partials numbers. None:
        the per-key path takes the batch."""
        if self.tables is None or self.batch is None or self.on_error is not OnError.FAIL or not (
                self.combined or (self.per_epoch and self._count_only)):
            return None
        records = to_records(batch)
        if not records:
            return None
        try:
            if self.combined:
                keys = pa.array([r[0] for r in records])
                columns: list[pa.Array] = []
                for i, agg in enumerate(self.batch):
                    values = [r[i + 1] for r in records]
                    if len(agg.names) == 1:
                        columns.append(pa.array(values))
                    else:
                        columns.extend(pa.array(list(c)) for c in zip(*values))
            else:
                counts = Counter(map(record_key_fn(self.key), records))
                keys, columns = pa.array(list(counts)), [pa.array(list(counts.values()), pa.int64())]
        except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, TypeError, IndexError, KeyError,
                OverflowError, ValueError):
            return None
        if not KeyIndex.supports(keys.type) or not all(
                (pa.types.is_integer(c.type) and not pa.types.is_uint64(c.type)) or pa.types.is_floating(c.type)
                for c in columns):
            return None
        names = [self.column or "key", *(label for labels in self.labels for label in labels.values())]
        return pa.RecordBatch.from_arrays([keys, *columns], names=names)

    def _columnar(self, batch: pa.RecordBatch) -> bool:
        if self.tables is None or self.batch is None:
            return False
        assert self.column is not None
        if self.column not in batch.schema.names or not KeyIndex.supports(batch.schema.field(self.column).type):
            return False
        if self.combined:
            return all(label in batch.schema.names for labels in self.labels for label in labels.values())
        try:
            return all(agg.accepts(batch) for agg in self.batch)
        except ValueError as exc:  # a missing value: the per-key path names its record
            if self.batch_only:
                raise OperatorError(self.name, f"<batch of {batch.num_rows} rows>", exc) from exc
            return False

    def _as_arrow(self, batch: Batch) -> tuple[pa.RecordBatch, str]:
        """Records as Arrow for an aggregate that only runs on batches (keyed by a function: its
        keys become a column `key`)."""
        if self.column is not None and type(batch) is pa.RecordBatch:
            return batch, self.column
        records = to_records(batch)
        arrow = to_arrow(records)
        if self.column is not None:
            return arrow, self.column
        keys = pa.array(list(map(record_key_fn(self.key), records)))
        return arrow.append_column("key", keys), "key"

    def _process_table(self, batch: pa.RecordBatch, column: str, partials: bool) -> Batch | None:
        """Merge an Arrow batch into the table: rows of records, or (`partials`) rows of
        partials in the accumulators' columns."""
        assert self.tables is not None and self.batch is not None
        hashes = carried_hashes(batch) if partials else None
        if hashes is not None:  # distinct keys, hashed by the local phase: no grouping, no hashing
            distinct, indices = batch.column(column), None
        else:
            distinct, indices = encode_key_column(batch, column, self.name)
        table = self.tables.ensure(distinct.type)
        if table is None:
            return self._process_records(batch)
        slots, added = table.slots(distinct, hashes)
        if added.any():
            self.tables.new_keys(table, slots[added])
        n = len(distinct)
        if indices is None:
            if self.per_epoch:
                table.merge(slots, self._row_partials(batch, True))
                return None
            indices = np.arange(n)
        if self.per_epoch:
            table.merge(slots, self._partials(batch, indices, n, partials))
            return None
        rows = self._row_partials(batch, partials)
        order, starts, lengths = group_order(indices, n)
        present = table.present(slots)
        group = np.repeat(np.arange(n), lengths) if present.any() else None
        results, totals = [], []
        for agg, per_row, base in zip(self.batch, rows, table.gather(slots), strict=True):
            running_acc: Accumulators = {}
            total: Accumulators = {}
            for name, ufunc in agg.merges.items():
                scanned = running(ufunc, np.asarray(per_row[name])[order], starts, lengths)
                total[name] = scanned[starts + lengths - 1]
                if group is not None:
                    scanned = np.where(present[group], ufunc(base[name][group], scanned), scanned)
                out = np.empty_like(scanned)
                out[order] = scanned
                running_acc[name] = out
            results.append(agg.result(running_acc))
            totals.append(total)
        table.merge(slots, totals)
        return pa.RecordBatch.from_arrays([batch.column(column), *map(arrow_column, results)],
                                          names=[column, *self.outputs])

    def _partials(self, batch: pa.RecordBatch, codes: np.ndarray, groups: int, partials: bool
                  ) -> list[Accumulators]:
        """Each aggregate's partials of the batch's `groups` distinct keys."""
        assert self.batch is not None
        if not partials:
            return [agg.add(batch, codes, groups) for agg in self.batch]
        return [{name: grouped(agg.merges[name], batch.column(labels[name]).to_numpy(zero_copy_only=False),
                               codes, groups) for name in agg.names}
                for agg, labels in zip(self.batch, self.labels, strict=True)]

    def _row_partials(self, batch: pa.RecordBatch, partials: bool) -> list[Accumulators]:
        """Each row's own partial (a row of partials, or a record lifted)."""
        assert self.batch is not None
        if partials:
            return [{name: batch.column(labels[name]).to_numpy(zero_copy_only=False) for name in agg.names}
                    for agg, labels in zip(self.batch, self.labels, strict=True)]
        rows = batch.num_rows
        return [agg.add(batch, np.arange(rows), rows) for agg in self.batch]

    # -- the per-key path -----------------------------------------------------------------------
    def _process_records(self, batch: Batch) -> Batch | None:
        if self.tables is not None and self.tables.table is not None:
            self._unemitted.update(self.tables.dissolve())
        if self.records is None:
            raise OperatorError(self.name, "<records>", TypeError("this aggregate runs on Arrow batches only"))
        records, keys, groups = batch_keys(batch, self.key, self.ctx.max_parallelism, self.name)
        if self.on_error is not OnError.FAIL:
            return self._one_by_one(batch, records, keys, groups)
        if self._count_only and not self.combined:
            return self._count(records, keys, groups)
        try:
            partials = self._record_partials(batch, records)
        except Exception as exc:
            return self._one_by_one(batch, records, keys, groups, exc)
        outs: list[list[Any]] = []
        for state, agg, values in zip(self.states, self.records, partials, strict=True):
            out: list[Any] = []
            try:
                self.backend.reduce_into(out, state, values, keys, groups, agg.merge)
            except Exception as exc:
                raise self.record_error(records[len(out)], exc) from exc
            outs.append(out)
        if self.per_epoch:
            self._unemitted.update(zip(keys, groups))
            return None
        return self._emitted(keys, outs)

    def _count(self, records: list[Any], keys: list[Any], groups: list[int]) -> Batch | None:
        out: list[Any] = []
        state = self.states[0]
        try:
            if not self.per_epoch:
                self.backend.count_into(out, state, keys, groups)
                return out
            counts = Counter(keys)  # combine within the batch: one state update per key
            group_of = dict(zip(keys, groups))
            distinct = list(counts)
            distinct_groups = [group_of[k] for k in distinct]
            self.backend.reduce_into(out, state, list(counts.values()), distinct, distinct_groups, operator.add)
        except Exception as exc:  # e.g. a restored count that is not a number
            raise OperatorError(self.name, records[0] if records else None, exc) from exc
        self._unemitted.update(zip(distinct, distinct_groups))
        return None

    def _record_partials(self, batch: Batch, records: list[Any]) -> list[list[Any]]:
        """Per aggregate, each record's partial: read from the partials' columns (or tuple items)
        behind a local phase, else the aggregate's value of the record, lifted."""
        assert self.records is not None
        out: list[list[Any]] = []
        if self.combined:
            if isinstance(batch, pa.RecordBatch):
                for batched, labels in zip(self.batch or [], self.labels, strict=True):
                    columns = [batch.column(labels[n]).to_pylist() for n in batched.names]
                    out.append(columns[0] if len(columns) == 1 else list(zip(*columns)))
                return out
            return [[r[i + 1] for r in records] for i in range(len(self.calls))]
        for call, agg in zip(self.calls, self.records, strict=True):
            if isinstance(batch, pa.RecordBatch):
                values = arrow_values(batch, call.value)
            else:
                values = record_values(records, call.value)
            out.append(values if agg.lift is None else list(map(agg.lift, values)))
        return out

    def _one_by_one(self, batch: Batch, records: list[Any], keys: list[Any], groups: list[int],
                    first_error: Exception | None = None) -> Batch | None:
        """A record at a time: a record whose value, lift or merge fails changes no state and is
        failed, skipped or dead-lettered by the operator's policy."""
        assert self.records is not None
        backend = self.backend
        letters: list[DeadLetter] = []
        out: list[Any] = []
        calls = list(zip(self.calls, self.records, self.states, strict=True))
        selectors = [row_selector(batch, call.value) for call in self.calls]
        for i, (record, key, group) in enumerate(zip(records, keys, groups, strict=True)):
            try:
                merged = []
                backend.set_current_key(key, group)
                for j, (_call, agg, state) in enumerate(calls):
                    if self.combined:
                        value = record[j + 1] if type(batch) is not pa.RecordBatch else self._partial_of(batch, i, j)
                    else:
                        value = value_of(record, selectors[j])
                        value = value if agg.lift is None else agg.lift(value)
                    acc = backend.get_for_read(state, _ABSENT)
                    merged.append(value if acc is _ABSENT else agg.merge(acc, value))
            except Exception as exc:
                self.reject(record, exc, letters)  # raises under on_error=FAIL
                continue
            for state, value in zip(self.states, merged, strict=True):
                backend.put(state, value)
            if self.per_epoch:
                self._unemitted[key] = group
            else:
                out.append((key, *(agg.result(v) for (_, agg, _), v in zip(calls, merged, strict=True))))
        return with_letters(None if self.per_epoch else out, letters)

    def _partial_of(self, batch: pa.RecordBatch, row: int, call: int) -> Any:
        assert self.batch is not None
        names = [self.labels[call][n] for n in self.batch[call].names]
        values = [batch.column(n)[row].as_py() for n in names]
        return values[0] if len(values) == 1 else tuple(values)

    def _emitted(self, keys: list[Any], outs: list[list[Any]]) -> list[Any]:
        assert self.records is not None
        results = [out if agg.lower is None else list(map(agg.lower, out))
                   for agg, out in zip(self.records, outs, strict=True)]
        return list(zip(keys, *results))

    # -- emitting once per epoch ---------------------------------------------------------------------
    def pre_barrier(self, checkpoint_id: int) -> Batch | None:
        return self._emit_changed() if self.per_epoch else None

    def end_input(self) -> Batch | None:
        return self._emit_changed() if self.per_epoch else None

    def _emit_changed(self) -> Batch | None:
        """The newest result of every key changed since the last emission."""
        tables = self.tables
        table = None if tables is None else tables.table
        if table is not None and self._unemitted:  # both paths ran this epoch: emit per key
            assert tables is not None
            self._unemitted.update(tables.dissolve())
            table = None
        if table is not None:
            assert tables is not None and self.batch is not None
            slots = table.take_unemitted()
            if not len(slots):
                return None
            keys, accumulators = tables.results(slots)
            results = [arrow_column(agg.result(acc)) for agg, acc in zip(self.batch, accumulators, strict=True)]
            emitted = pa.RecordBatch.from_arrays([keys, *results], names=[self.column or "key", *self.outputs])
            return _records(emitted) if self._records_out else emitted
        if not self._unemitted:
            return None
        assert self.records is not None
        backend, out = self.backend, []
        for key, group in self._unemitted.items():
            backend.set_current_key(key, group)
            out.append((key, *(agg.result(backend.get(state)) for state, agg in zip(self.states, self.records))))
        self._unemitted = {}
        return out

    # -- state ----------------------------------------------------------------------------------------
    def snapshot(self, checkpoint_id: int) -> OperatorSnapshot:
        if self.tables is not None:
            self.tables.flush()
        return super().snapshot(checkpoint_id)

    def restore(self, keyed: dict[int, dict[str, dict[Any, Any]]] | None, states: list[Any]) -> None:
        self._unemitted = {}
        super().restore(keyed, states)
        if self.tables is not None:
            self.tables.reload()

    def query(self, key: Any) -> dict[str, Any]:
        found = super().query(key)
        if self.tables is not None:
            found.update(self.tables.query(key))
        return found


def _from_records(batch: Any) -> bool:
    return bool(batch.schema.metadata == FROM_RECORDS)


def _records(batch: pa.RecordBatch) -> list[tuple[Any, ...]]:
    """An output batch as the per-key path emits it: `(key, result, ...)` tuples."""
    return list(zip(*(column.to_pylist() for column in batch.columns)))
