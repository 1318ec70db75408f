"""Each aggregate twice: per record (Python partials) and per batch (numpy accumulator columns).

A partial is what one key's records fold into (dissertation §5.2.3.3: lift, combine, lower):
a count, a sum, a minimum, `(sum, count)` for a mean, a reduced value, an aggregate function's
accumulator. `RecordAggregate` folds Python values (the per-key path: records, or keys the
columnar table cannot hold). `BatchAggregate` computes the partials of a whole batch at once,
given each row's group (`codes`), as named numpy *accumulator* columns that merge element-wise
with a ufunc (`np.add`, `np.minimum`, ...): the columnar path, and the shape of a user's
`BatchAggregateFunction`, which plugs in as is.

Values: what an aggregate reads of a record is a `ValueSelector` (plan.aggregates): the record, a
field (Arrow column, dict key), a tuple index, or a function; `record_values` and `batch_values`
read it.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ....plan.aggregates import AggregateCall, AggregateKind, ValueSelector, accumulator_names, is_batch_function

Accumulators = dict[str, np.ndarray]


# -- values ---------------------------------------------------------------------------------------
def record_values(records: list[Any], selector: ValueSelector) -> list[Any]:
    """What `selector` reads of each record (the records themselves for None)."""
    if selector is None:
        return records
    if isinstance(selector, (str, int)):
        return list(map(operator.itemgetter(selector), records))
    return list(map(selector, records))


def arrow_values(batch: pa.RecordBatch, selector: ValueSelector) -> list[Any]:
    """What `selector` reads of each row of an Arrow batch, as Python values."""
    if isinstance(selector, str) and selector in batch.schema.names:
        return batch.column(selector).to_pylist()
    from ...wire.batches import to_records

    return record_values(to_records(batch), selector)


def numeric_column(batch: pa.RecordBatch, selector: ValueSelector, what: str) -> np.ndarray | None:
    """A numeric value column of `batch` as numpy (zero-copy where it can be), or None when the
    values are not an integer or float column (then the per-key path runs).

    Raises:
        ValueError: a missing value, naming its row.
    """
    if not isinstance(selector, str) or selector not in batch.schema.names:
        return None
    column = batch.column(selector)
    kind = column.type
    if not (pa.types.is_integer(kind) or pa.types.is_floating(kind)) or pa.types.is_uint64(kind):
        return None
    if column.null_count:
        row = int(pc.index(pc.is_null(column), True).as_py())
        raise ValueError(f"{what}: missing value in row {row} (column {selector!r})")
    values = column.to_numpy(zero_copy_only=False)
    return values if values.dtype.kind == "f" or values.dtype == np.int64 else values.astype(np.int64)


# -- per record -------------------------------------------------------------------------------------
def _one(_: Any) -> int:
    return 1


def _mean_merge(a: tuple[Any, int], b: tuple[Any, int]) -> tuple[Any, int]:
    return (a[0] + b[0], a[1] + b[1])


def _mean_lift(value: Any) -> tuple[Any, int]:
    return (value, 1)


def _mean_result(partial: tuple[Any, int]) -> float:
    return partial[0] / partial[1]


@dataclass(frozen=True, slots=True)
class RecordAggregate:
    """One aggregate on Python values: `lift` a value into a partial (None: the value is its own
    partial), `merge` two partials into a new one, `lower` a partial to the result (None: the
    partial is the result)."""

    lift: Callable[[Any], Any] | None
    merge: Callable[[Any, Any], Any]
    lower: Callable[[Any], Any] | None = None

    def result(self, partial: Any) -> Any:
        return partial if self.lower is None else self.lower(partial)


def _aggregate_function(function: Any) -> RecordAggregate:
    create, add = function.create_accumulator, function.add

    def lift(value: Any) -> Any:
        return add(value, create())

    return RecordAggregate(lift, function.merge, function.get_result)


def record_aggregate(call: AggregateCall) -> RecordAggregate:
    """The per-record form of `call` (a `BatchAggregateFunction` has none: it runs on Arrow)."""
    kind = call.kind
    if kind is AggregateKind.COUNT:
        return RecordAggregate(_one, operator.add)
    if kind is AggregateKind.SUM:
        return RecordAggregate(None, operator.add)
    if kind is AggregateKind.MIN:
        return RecordAggregate(None, min)
    if kind is AggregateKind.MAX:
        return RecordAggregate(None, max)
    if kind is AggregateKind.MEAN:
        return RecordAggregate(_mean_lift, _mean_merge, _mean_result)
    if kind is AggregateKind.REDUCE:
        return RecordAggregate(None, call.function)
    if is_batch_function(call.function):
        raise TypeError(f"{type(call.function).__name__} aggregates Arrow batches: it has no per-record form")
    return _aggregate_function(call.function)


# -- per batch --------------------------------------------------------------------------------------
class BatchAggregate:
    """One aggregate on Arrow batches: named accumulators, each merged element-wise by a ufunc.

    `add(batch, codes, groups)` returns the accumulators of `groups` groups (row i of `batch` is
    in group `codes[i]`); `merge` combines two aligned accumulator sets; `result` lowers
    accumulators to the results. `partial_values` gives one key's accumulators as the per-key
    path holds its partial (what state readers show).
    """

    def __init__(self, call: AggregateCall, merges: Mapping[str, np.ufunc]) -> None:
        self.call = call
        self.merges = dict(merges)
        self.names = accumulator_names(call)

    def accepts(self, batch: pa.RecordBatch) -> bool:
        """Whether this batch's values suit the vectorized path (numbers, for the built-ins)."""
        return True

    def add(self, batch: pa.RecordBatch, codes: np.ndarray, groups: int) -> Accumulators:
        raise NotImplementedError

    def merge(self, a: Accumulators, b: Accumulators) -> Accumulators:
        return {name: ufunc(a[name], b[name]) for name, ufunc in self.merges.items()}

    def result(self, acc: Accumulators) -> np.ndarray | pa.Array:
        (only,) = self.names
        return acc[only]

    def partial_value(self, acc: Mapping[str, Any]) -> Any:
        """One key's partial as the per-key path holds it (scalars in, a Python value out)."""
        if len(self.names) == 1:
            return _python(acc[self.names[0]])
        return tuple(_python(acc[n]) for n in self.names)

    def from_partials(self, partials: list[Any]) -> Accumulators:
        """Per-key partials (as `partial_value` gives them) as accumulator columns."""
        if len(self.names) == 1:
            return {self.names[0]: np.asarray(partials)}
        return {n: np.asarray([p[i] for p in partials]) for i, n in enumerate(self.names)}


def _python(value: Any) -> Any:
    return value.item() if isinstance(value, np.generic) else value


class _Count(BatchAggregate):
    def add(self, batch: pa.RecordBatch, codes: np.ndarray, groups: int) -> Accumulators:
        return {"count": np.bincount(codes, minlength=groups)}


def grouped(ufunc: np.ufunc, values: np.ndarray, codes: np.ndarray, groups: int) -> np.ndarray:
    """`ufunc` over the values of each group, in row order (each group starts from its own first value)."""
    if ufunc is np.add:
        if values.dtype.kind == "f":
            return np.bincount(codes, weights=values, minlength=groups)
        out = np.zeros(groups, dtype=values.dtype)
    else:
        out = np.empty(groups, dtype=values.dtype)
        out[codes[::-1]] = values[::-1]  # every group starts from one of its own values
    ufunc.at(out, codes, values)
    return out


class _Numeric(BatchAggregate):
    """sum, min, max and mean of a numeric column (int64 or float64 accumulators)."""

    def __init__(self, call: AggregateCall, merges: Mapping[str, np.ufunc], what: str) -> None:
        super().__init__(call, merges)
        self.what = what

    def accepts(self, batch: pa.RecordBatch) -> bool:
        return numeric_column(batch, self.call.value, self.what) is not None

    def _values(self, batch: pa.RecordBatch) -> np.ndarray:
        values = numeric_column(batch, self.call.value, self.what)
        if values is None:
            raise TypeError(f"{self.what} needs a numeric column {self.call.value!r}")
        return values

    def add(self, batch: pa.RecordBatch, codes: np.ndarray, groups: int) -> Accumulators:
        values = self._values(batch)
        if self.call.kind is AggregateKind.MEAN:
            return {"sum": np.bincount(codes, weights=values, minlength=groups),
                    "count": np.bincount(codes, minlength=groups)}
        (name,) = self.names
        return {name: grouped(self.merges[name], values, codes, groups)}

    def result(self, acc: Accumulators) -> np.ndarray | pa.Array:
        if self.call.kind is AggregateKind.MEAN:
            return acc["sum"] / acc["count"]
        return super().result(acc)


class _UserBatch(BatchAggregate):
    """A user's `BatchAggregateFunction`: its accumulators, `add_batch` and `result`."""

    def add(self, batch: pa.RecordBatch, codes: np.ndarray, groups: int) -> Accumulators:
        produced = self.call.function.add_batch(batch, codes, groups)
        missing = [n for n in self.names if n not in produced]
        if missing:
            raise ValueError(f"{type(self.call.function).__name__}.add_batch returned no accumulator {missing[0]!r}")
        return {n: np.asarray(produced[n]) for n in self.names}

    def result(self, acc: Accumulators) -> np.ndarray | pa.Array:
        out = self.call.function.result(dict(acc))
        return out if isinstance(out, (pa.Array, pa.ChunkedArray)) else np.asarray(out)


def batch_aggregate(call: AggregateCall) -> BatchAggregate | None:
    """The vectorized form of `call`, or None (reduce, and per-record aggregate functions)."""
    kind = call.kind
    if kind is AggregateKind.COUNT:
        return _Count(call, {"count": np.add})
    if kind is AggregateKind.SUM:
        return _Numeric(call, {"sum": np.add}, "sum")
    if kind is AggregateKind.MIN:
        return _Numeric(call, {"min": np.minimum}, "min")
    if kind is AggregateKind.MAX:
        return _Numeric(call, {"max": np.maximum}, "max")
    if kind is AggregateKind.MEAN:
        return _Numeric(call, {"sum": np.add, "count": np.add}, "mean")
    if kind is AggregateKind.AGGREGATE and is_batch_function(call.function):
        return _UserBatch(call, call.function.accumulators)
    return None


def value_of(record: Any, selector: ValueSelector) -> Any:
    """What `selector` reads of one record."""
    if selector is None:
        return record
    if isinstance(selector, (str, int)):
        return record[selector]
    return selector(record)


def arrow_column(values: Any) -> pa.Array:
    """Results as an Arrow column: int64 and float64 wrap their numpy buffer without a copy."""
    if isinstance(values, (pa.Array, pa.ChunkedArray)):
        return values
    array = np.asarray(values)
    if array.dtype == np.int64 or array.dtype == np.float64:
        return pa.Array.from_buffers(pa.from_numpy_dtype(array.dtype), len(array),
                                     [None, pa.py_buffer(np.ascontiguousarray(array))])
    return pa.array(array)
