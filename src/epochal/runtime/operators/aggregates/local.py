"""The local phase of a keyed aggregation: one partial per key, shipped before the barrier.

Runs in the upstream operator's task (`plan.local_global` chains it there), ahead of the key
exchange. Records of a key fold into one partial: on Arrow batches keyed by a column, per batch
with one dictionary encoding and numpy per distinct key, merged into an `AggregateTable` (no key
groups: the local phase never routes); on records, a Python dict per key (a count: a `Counter`,
whose counting loop is C). What it holds goes out as partials (an Arrow batch with the key column
and one column per accumulator, or tuples `(key, partial, ...)`; a reduce's reduced values bare):

- ahead of every checkpoint barrier (`pre_barrier`), so the local phase holds nothing when a
  snapshot is taken and needs no state of its own (ABS, Algorithm 1: the partials belong to the
  epoch the barrier closes, and the global phase's state includes them);
- at the end of the input, and when it holds more than `max_keys` keys;
- at the end of every batch instead, when the global phase emits per record
  (`until_barrier=False`), so updates are not held back.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pyarrow as pa

from ....errors import KeySelectorError
from ....plan.aggregates import AggregateKind, LocalAggregateSpec, is_batch_function, partial_key_column
from ....plan.specs import OnError
from ...key_index import KeyIndex
from ...keys import encode_key_column, key_column, record_key_fn
from ...wire.batches import to_arrow, to_records
from ...wire.elements import Batch
from ..bad_records import DeadLetter, with_letters
from ..base import OperatorSnapshot, RuntimeOperator
from .functions import BatchAggregate, arrow_column, batch_aggregate, record_aggregate, record_values, value_of
from .table import AggregateTable

_ABSENT = object()


class LocalAggregateOperator(RuntimeOperator):
    """Partials per key until the next barrier (or batch); see the module docstring."""

    def __init__(self, spec: LocalAggregateSpec) -> None:
        super().__init__(spec)
        self.key = spec.key
        self.column = key_column(spec.key)
        self.key_fn = record_key_fn(spec.key)
        self.calls = spec.aggregates
        self.until_barrier = spec.until_barrier
        self.max_keys = spec.max_keys
        self.values_only = spec.values_only
        self.on_error = spec.on_error
        self.out_key = partial_key_column(spec.key)
        batch = [batch_aggregate(c) for c in self.calls]
        self.batch: list[BatchAggregate] | None = None if any(b is None for b in batch) else batch  # type: ignore[assignment]
        batch_only = any(c.kind is AggregateKind.AGGREGATE and is_batch_function(c.function) for c in self.calls)
        self.records = None if batch_only else [record_aggregate(c) for c in self.calls]
        self._count_only = len(self.calls) == 1 and self.calls[0].kind is AggregateKind.COUNT
        self._table: AggregateTable | None = None
        self._counts: Counter[Any] = Counter()
        self._partials: dict[Any, Any] = {}

    # -- records in -----------------------------------------------------------------------------
    def process(self, batch: Batch) -> Batch | None:
        letters: list[DeadLetter] = []
        if type(batch) is pa.RecordBatch and self.column is not None and self._columnar(batch, self.column):
            self._add_arrow(batch, self.column)
        elif self.records is None:  # a batch aggregate function: records become a batch
            self._add_arrow(*self._as_arrow(batch))
        else:
            self._add_records(batch, letters)
        if not self.until_barrier or self._held() > self.max_keys:
            return with_letters(self._ship(), letters)
        return with_letters(None, letters)

    def _columnar(self, batch: pa.RecordBatch, column: str) -> bool:
        if self.batch is None or column not in batch.schema.names:
            return False
        key_type = batch.schema.field(column).type
        if not KeyIndex.supports(key_type) or (self._table is not None and not self._table.accepts(key_type)):
            return False
        try:
            return all(agg.accepts(batch) for agg in self.batch)
        except ValueError:  # a missing value: the global phase's per-key path names the record
            return False

    def _as_arrow(self, batch: Batch) -> tuple[pa.RecordBatch, str]:
        """Records as Arrow (keyed by a function: its keys become a column `key`)."""
        if type(batch) is pa.RecordBatch and self.column is not None:
            return batch, self.column
        records = to_records(batch)
        arrow = to_arrow(records)
        if self.column is not None:
            return arrow, self.column
        return arrow.append_column("key", pa.array(self._keys(records))), "key"

    def _add_arrow(self, batch: pa.RecordBatch, column: str) -> None:
        assert self.batch is not None
        distinct, codes = encode_key_column(batch, column, self.name)
        table = self._table
        if table is None:
            table = self._table = AggregateTable(distinct.type, 1, self.batch, key_groups=False)
        slots, _ = table.slots(distinct)
        table.merge(slots, [agg.add(batch, codes, len(distinct)) for agg in self.batch])

    def _add_records(self, batch: Batch, letters: list[DeadLetter]) -> None:
        records = to_records(batch)
        keys = self._keys(records)
        if self._count_only:
            try:
                self._counts.update(keys)
            except TypeError as exc:  # an unhashable key
                bad = next(r for r, k in zip(records, keys) if not _hashable(k))
                raise KeySelectorError(self.name, bad, exc) from exc
            return
        self._fold(records, keys, letters)

    def _keys(self, records: list[Any]) -> list[Any]:
        try:
            return list(map(self.key_fn, records))
        except Exception:
            pass  # find the record that failed, and say which it was
        keys = []
        for record in records:
            try:
                keys.append(self.key_fn(record))
            except Exception as exc:
                raise KeySelectorError(self.name, record, exc) from exc
        return keys

    def _fold(self, records: list[Any], keys: list[Any], letters: list[DeadLetter]) -> None:
        assert self.records is not None
        partials = self._partials
        calls = list(zip(self.calls, self.records, strict=True))
        if len(calls) == 1 and self.on_error is OnError.FAIL:
            (call, agg), = calls
            values = record_values(records, call.value)
            if agg.lift is not None:
                values = list(map(agg.lift, values))
            merge = agg.merge
            done = 0
            try:
                for done, (key, value) in enumerate(zip(keys, values)):  # noqa: B007 - read in the except
                    held = partials.get(key, _ABSENT)
                    partials[key] = value if held is _ABSENT else merge(held, value)
            except Exception as exc:
                raise self.record_error(records[done], exc) from exc
            return
        single = len(calls) == 1
        for record, key in zip(records, keys, strict=True):
            held = partials.get(key, _ABSENT)
            try:
                new = []
                for i, (call, agg) in enumerate(calls):
                    value = value_of(record, call.value)
                    value = value if agg.lift is None else agg.lift(value)
                    if held is not _ABSENT:
                        value = agg.merge(held if single else held[i], value)
                    new.append(value)
            except Exception as exc:
                self.reject(record, exc, letters)  # raises under on_error=FAIL
                continue
            partials[key] = new[0] if single else new

    # -- partials out -----------------------------------------------------------------------------
    def _held(self) -> int:
        """Keys held (the table's: every key it has a row for, held or shipped: its memory)."""
        return len(self._counts) + len(self._partials) + (len(self._table) if self._table is not None else 0)

    def _ship(self) -> Batch | None:
        """Everything held, as partials (an Arrow batch, or tuples), and forget it."""
        arrow = self._ship_table()
        if self._counts:
            records: list[Any] | None = list(self._counts.items())
            self._counts = Counter()
        elif self._partials:
            if self.values_only:
                records = list(self._partials.values())
            elif len(self.calls) == 1:
                records = list(self._partials.items())
            else:
                records = [(k, *v) for k, v in self._partials.items()]
            self._partials = {}
        else:
            records = None
        if arrow is None:
            return records
        if records is None:
            return arrow
        return [*to_records(arrow), *records]  # both paths ran: one batch, as tuples

    def _ship_table(self) -> pa.RecordBatch | None:
        table = self._table
        if table is None:
            return None
        slots = table.present_slots()
        if len(table) > self.max_keys:
            self._table = None  # bounded: a new index for the next keys
        else:
            table.forget(slots)
        if not len(slots):
            return None
        columns, names = [table.keys_at(slots)], [self.out_key]
        for labels, acc in zip(table.labels, table.gather(slots), strict=True):
            for name, label in labels.items():
                columns.append(arrow_column(acc[name]))
                names.append(label)
        return pa.RecordBatch.from_arrays(columns, names=names)

    def pre_barrier(self, checkpoint_id: int) -> Batch | None:
        return self._ship()

    def end_input(self) -> Batch | None:
        return self._ship()

    def snapshot(self, checkpoint_id: int) -> OperatorSnapshot:
        held = len(self._counts) + len(self._partials)
        if self._table is not None:
            held += len(self._table.present_slots())
        if held:  # the barrier's flush shipped everything: holding partials here is a bug
            raise RuntimeError(f"local aggregation {self.name!r} holds {held} keys at a snapshot")
        return OperatorSnapshot()


def _hashable(key: Any) -> bool:
    try:
        hash(key)
    except TypeError:
        return False
    return True
