"""The local phase of a keyed aggregation: one partial per key, shipped before the barrier.

Runs in the upstream operator's task (`plan.local_global` chains it there), ahead of the key
exchange. Records of a key fold into one partial: Arrow batches keyed by a column are held as
they come (no copy) and grouped when they ship, all of them at once: by Arrow's hash aggregation
for the built-ins (`acero.py`), else with one dictionary encoding and each aggregate's partials
computed in numpy per distinct key; records fold into a Python dict per key (a count: a
`Counter`, whose counting loop is C). Partials go out with their keys' hashes
(`KEY_HASH_COLUMN`), so the router and the global phase hash no key again.
Grouping many batches at once is what makes it cheap: the distinct keys of 8k-row batches cost a
lookup each in any table kept across batches, several times what hashing a row costs (measured
on a Zipf word stream: 330 ns a word more with a `KeyIndex` per 8k batch). What it holds goes
out as partials (an Arrow batch with the key column and one column per accumulator, or tuples
`(key, partial, ...)`; a reduce's reduced values bare):

- ahead of every checkpoint barrier (`pre_barrier`), so the local phase holds nothing when a
  snapshot is taken and needs no state of its own (ABS, Algorithm 1: the partials belong to the
  epoch the barrier closes, and the global phase's state includes them);
- at the end of the input, and when it holds more than `max_keys` keys of records or
  `max_rows` rows (`max_bytes` bytes) of Arrow batches;
- at the end of every batch instead, when the global phase emits per record
  (`until_barrier=False`), so updates are not held back.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ....errors import KeySelectorError
from ....plan.aggregates import AggregateKind, LocalAggregateSpec, ValueSelector, is_batch_function, partial_key_column
from ....plan.specs import OnError
from ...key_index import KEY_HASH_COLUMN, KeyIndex, hash_keys
from ...keys import key_column, record_key_fn
from ...wire.batches import to_arrow, to_records
from ...wire.elements import Batch
from ..bad_records import DeadLetter, with_letters
from ..base import OperatorSnapshot, RuntimeOperator
from .acero import grouped_partials
from .functions import (
    BatchAggregate,
    arrow_column,
    batch_aggregate,
    record_aggregate,
    record_values,
    row_selector,
    value_of,
)
from .table import labels_of

_ABSENT = object()
# Schema metadata of a batch of partials made from records: the global phase emits records for it.
FROM_RECORDS = {b"epochal.partials": b"records"}


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
        self._held_batches: list[pa.RecordBatch] = []  # Arrow batches not yet grouped
        self._held_rows = 0
        self._held_bytes = 0
        self._held_column = ""
        self.max_rows = spec.max_rows
        self.max_bytes = spec.max_bytes
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
        if (not self.until_barrier or self._held() > self.max_keys or self._held_rows >= self.max_rows
                or self._held_bytes >= self.max_bytes):
            return with_letters(self._ship(), letters)
        return with_letters(None, letters)

    def _columnar(self, batch: pa.RecordBatch, column: str) -> bool:
        if self.batch is None or column not in batch.schema.names:
            return False
        key_type = batch.schema.field(column).type
        if not KeyIndex.supports(key_type):
            return False
        if self._held_batches and not batch.schema.equals(self._held_batches[0].schema):
            return False  # one schema held at a time (rare: then the records path takes the batch)
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
        self._held_batches.append(batch)
        self._held_rows += batch.num_rows
        self._held_bytes += batch.nbytes
        self._held_column = column

    def _add_records(self, batch: Batch, letters: list[DeadLetter]) -> None:
        records = to_records(batch)
        arrow_keys = isinstance(batch, pa.RecordBatch) and self.column in batch.schema.names
        if self._count_only and not arrow_keys:
            try:  # keys counted as they are made, no list of them: a failure fails the job
                self._counts.update(map(self.key_fn, records))
                return
            except Exception as exc:
                keys = self._keys(records)  # raises, naming the record whose key failed
                bad = next((r for r, k in zip(records, keys) if not _hashable(k)), records[0])
                raise KeySelectorError(self.name, bad, exc) from exc
        elif isinstance(batch, pa.RecordBatch) and arrow_keys:
            keys = batch.column(self.column).to_pylist()  # its rows are tuples: no item by name
        else:
            keys = self._keys(records)
        if self._count_only:
            try:
                self._counts.update(keys)
            except TypeError as exc:  # an unhashable key
                bad = next(r for r, k in zip(records, keys) if not _hashable(k))
                raise KeySelectorError(self.name, bad, exc) from exc
            return
        self._fold(records, keys, letters, [row_selector(batch, call.value) for call in self.calls])

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

    def _fold(self, records: list[Any], keys: list[Any], letters: list[DeadLetter],
              selectors: list[ValueSelector]) -> None:
        """Fold records into the held partials; `selectors` read each call's value of a record."""
        assert self.records is not None
        partials = self._partials
        calls = list(zip(selectors, self.records, strict=True))
        if len(calls) == 1 and self.on_error is OnError.FAIL:
            (selector, agg), = calls
            values = record_values(records, selector)
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
                for i, (selector, agg) in enumerate(calls):
                    value = value_of(record, selector)
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
        """Keys held of records."""
        return len(self._counts) + len(self._partials)

    def _ship(self) -> Batch | None:
        """Everything held, as partials (an Arrow batch, or tuples), and forget it."""
        arrow = self._ship_table()
        counted = self._counts_table() if arrow is None and self._counts and self.until_barrier else None
        if counted is not None:
            self._counts = Counter()
            return counted
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
        """The held Arrow batches grouped: one dictionary encoding over all of them (Arrow's
        encoding of a chunked column shares one dictionary across its chunks), then each
        aggregate's partials per distinct key."""
        batches, column = self._held_batches, self._held_column
        if not batches:
            return None
        self._held_batches, self._held_rows, self._held_bytes = [], 0, 0
        assert self.batch is not None
        table = pa.Table.from_batches(batches)
        keys = table.column(column)
        if pa.types.is_dictionary(keys.type):
            keys = pa.chunked_array([c.dictionary_decode() for c in keys.chunks])
            table = table.set_column(table.schema.get_field_index(column), column, keys)
        by_arrow = grouped_partials(table, column, self.batch)
        if by_arrow is not None:  # built-ins: Arrow groups and aggregates in one pass
            distinct, accumulators = by_arrow
            columns, names = [distinct], [self.out_key]
            for partial, labels in zip(accumulators, labels_of(self.batch), strict=True):
                for name, label in labels.items():
                    columns.append(partial[name])
                    names.append(label)
            return _with_hashes(columns, names)
        encoded = pc.dictionary_encode(keys, null_encoding="encode")
        distinct = encoded.chunk(0).dictionary
        codes = np.concatenate([c.indices.to_numpy(zero_copy_only=False) for c in encoded.chunks])
        rows = _one_batch(table, self._value_columns(table))
        columns, names = [distinct], [self.out_key]
        for agg, labels in zip(self.batch, labels_of(self.batch), strict=True):
            partial = agg.add(rows, codes, len(distinct))
            for name, label in labels.items():
                columns.append(arrow_column(partial[name]))
                names.append(label)
        return _with_hashes(columns, names)

    def _counts_table(self) -> pa.RecordBatch | None:
        """The counts of records' keys as a batch of partials with their hashes, marked as from
        records (the global phase emits records for them): the global phase then merges them
        columnar without grouping or hashing a key. None when the keys make no column a
        `KeyIndex` takes (mixed types, floats, tuples...): then they go as tuples."""
        assert self.batch is not None
        try:
            keys = pa.array(list(self._counts))
        except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, TypeError, OverflowError,
                ValueError):
            return None
        if not KeyIndex.supports(keys.type):
            return None
        counts = np.fromiter(self._counts.values(), dtype=np.int64, count=len(self._counts))
        (label,) = labels_of(self.batch)[0].values()
        batch = _with_hashes([keys, arrow_column(counts)], [self.out_key, label])
        return batch.replace_schema_metadata(FROM_RECORDS)

    def _value_columns(self, table: pa.Table) -> list[str] | None:
        """The columns the aggregates read (None: all, for a batch function)."""
        if self.records is None:
            return None
        return sorted({c.value for c in self.calls if isinstance(c.value, str) and c.value in table.column_names})

    def pre_barrier(self, checkpoint_id: int) -> Batch | None:
        return self._ship()

    def end_input(self) -> Batch | None:
        return self._ship()

    def snapshot(self, checkpoint_id: int) -> OperatorSnapshot:
        held = len(self._counts) + len(self._partials) + self._held_rows
        if held:  # the barrier's flush shipped everything: holding partials here is a bug
            raise RuntimeError(f"local aggregation {self.name!r} holds {held} keys at a snapshot")
        return OperatorSnapshot()


def _hashable(key: Any) -> bool:
    try:
        hash(key)
    except TypeError:
        return False
    return True


def _one_batch(table: pa.Table, only: list[str] | None) -> pa.RecordBatch:
    """The table (or only some columns) as one record batch: one copy at most."""
    if only is not None:
        if not only:  # a count reads no column
            return pa.RecordBatch.from_arrays([], names=[])
        table = table.select(only)
    batches = table.combine_chunks().to_batches()
    return batches[0] if batches else pa.RecordBatch.from_pylist([], schema=table.schema)


def _with_hashes(columns: list[pa.Array], names: list[str]) -> pa.RecordBatch:
    """Partials (the distinct keys first) as a batch, with the keys' hashes where `KeyIndex`
    takes the key type: the exchange and the global phase find the keys by them, so each
    distinct key of an epoch is hashed once on its way (issue 36)."""
    if KeyIndex.supports(columns[0].type):
        hashes = hash_keys(columns[0])
        columns = [*columns, pa.Array.from_buffers(pa.uint64(), len(hashes), [None, pa.py_buffer(hashes)])]
        names = [*names, KEY_HASH_COLUMN]
    return pa.RecordBatch.from_arrays(columns, names=names)
