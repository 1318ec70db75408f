"""Window aggregate functions as partial aggregates: lift, combine, lower (dissertation §5.2.3.3).

A slice keeps one partial per key; a window's result combines the partials of its slices and
lowers them (`result`). How windows may combine partials is the aggregate's `Combining`:
invertible partials (count, sum) slide by adding the slices that enter a window and subtracting
those that leave; associative ones (min, max, reduce, aggregate) only combine, so windows slide
over a two-stack queue of slices; `Process` keeps the records themselves.

`reduce` and `merge` functions must be associative and commutative: records arriving out of order
and slices merging (sessions) combine partials in another order than event time.
`reduce_groups` is the columnar path's pre-aggregation: Count, Sum, Min and Max run in numpy;
the others call the user's function per value (it is a Python function per value by nature).
"""

from __future__ import annotations

import functools
import operator
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import Any, ClassVar, TypeAlias

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc


class Combining(Enum):
    """How a window combines the partials of its slices."""

    INVERTIBLE = "invertible"  # a partial can be subtracted: windows slide by add/subtract
    ASSOCIATIVE = "associative"  # partials only combine: windows slide over a two-stack queue
    KEEP_RECORDS = "keep_records"  # the window function needs the records themselves


Values: TypeAlias = pa.Array | pa.ChunkedArray | np.ndarray | list[Any] | None


class WindowAggregate(ABC):
    """One aggregate function on windows, as partials: `lift`, `fold`, `merge`, `result`."""

    combining: ClassVar[Combining] = Combining.ASSOCIATIVE

    @property
    def merge_function(self) -> Callable[[Any, Any], Any]:
        """`merge` as a plain function (a builtin where there is one: prefix sums use it)."""
        return self.merge

    @abstractmethod
    def lift(self, value: Any) -> Any:
        """The partial of one value (the first of a slice)."""

    @abstractmethod
    def fold(self, partial: Any, value: Any) -> Any:
        """`partial` with one more value."""

    @abstractmethod
    def merge(self, a: Any, b: Any) -> Any:
        """Two partials combined; changes neither."""

    @abstractmethod
    def result(self, partial: Any) -> Any:
        """A window's result from its combined partial (lower)."""

    def identity(self) -> Any:
        """The empty partial (invertible aggregates only)."""
        raise TypeError(f"{type(self).__name__} has no identity partial")

    def subtract(self, a: Any, b: Any) -> Any:
        """`a` without `b` (invertible aggregates only)."""
        raise TypeError(f"{type(self).__name__} is not invertible")

    def reduce_groups(self, values: Values, order: np.ndarray, bounds: np.ndarray) -> list[Any]:
        """The partial of each group of `values[order]`, groups starting at `bounds`.

        The default folds in Python, in `order` (the columnar path keeps arrival order there).
        """
        items = _python_values(values, order)
        ends = [*bounds[1:].tolist(), len(order)]
        out = []
        lift, fold = self.lift, self.fold
        for start, end in zip(bounds.tolist(), ends):
            partial = lift(items[start])
            for i in range(start + 1, end):
                partial = fold(partial, items[i])
            out.append(partial)
        return out


    def reduce_by_code(self, values: Values, codes: np.ndarray, n_codes: int) -> tuple[np.ndarray, list[Any]] | None:
        """(codes present, the partial of each) of `values` grouped by `codes` in `[0, n_codes)`,
        without sorting; None where this aggregate cannot (then `reduce_groups` is used)."""
        return None


def _python_values(values: Values, order: np.ndarray) -> list[Any]:
    if values is None:
        return [None] * len(order)
    if isinstance(values, (pa.Array, pa.ChunkedArray)):
        return values.take(pa.array(order)).to_pylist()
    if isinstance(values, np.ndarray):
        return values[order].tolist()
    return [values[i] for i in order.tolist()]


def _numeric(values: Values, order: np.ndarray | None, what: str) -> np.ndarray | None:
    """`values[order]` (all values: order None) as a numeric numpy array, or None if they are not
    numbers (then the Python path runs)."""
    if values is None:
        raise ValueError(f"{what} needs values")
    if isinstance(values, (pa.Array, pa.ChunkedArray)):
        if values.null_count:
            row = int(pc.index(pc.is_null(values), True).as_py())
            raise ValueError(f"{what}: missing value in row {row}")
        kind = values.type
        if not (pa.types.is_integer(kind) or pa.types.is_floating(kind)):
            return None
        array = np.asarray(values.to_numpy(zero_copy_only=False) if isinstance(values, pa.Array)
                           else values.combine_chunks().to_numpy(zero_copy_only=False))
    elif isinstance(values, np.ndarray):
        array = values
    else:
        array = np.asarray(values)
    if array.dtype.kind not in "iuf":
        return None
    out: np.ndarray = array if order is None else array[order]
    return out


def _reduce_at(ufunc: np.ufunc, values: Values, codes: np.ndarray, n_codes: int,
               what: str) -> tuple[np.ndarray, list[Any]] | None:
    """`ufunc` over the values of each code, unbuffered in row order (numpy's `ufunc.at`)."""
    if n_codes > 4 * len(codes) + 4096:
        return None
    array = _numeric(values, None, what)
    if array is None or not len(array):
        return None
    seen = np.zeros(n_codes, dtype=np.bool_)
    seen[codes] = True
    present = np.flatnonzero(seen)
    if ufunc is np.add:
        out = np.zeros(n_codes, dtype=array.dtype)
    else:  # any value of the batch is a neutral start: the group's own values decide
        out = np.full(n_codes, array[0], dtype=array.dtype)
        out[codes[::-1]] = array[::-1]  # each code starts from one of its own values
    ufunc.at(out, codes, array)
    return present, out[present].tolist()


class Count(WindowAggregate):
    """The number of records in the window."""

    combining = Combining.INVERTIBLE

    @property
    def merge_function(self) -> Callable[[Any, Any], Any]:
        return operator.add

    def lift(self, value: Any) -> int:
        return 1

    def fold(self, partial: int, value: Any) -> int:
        return partial + 1

    def merge(self, a: int, b: int) -> int:
        return a + b

    def subtract(self, a: int, b: int) -> int:
        return a - b

    def identity(self) -> int:
        return 0

    def result(self, partial: int) -> int:
        return partial

    def reduce_groups(self, values: Values, order: np.ndarray, bounds: np.ndarray) -> list[Any]:
        return np.diff(np.append(bounds, len(order))).tolist()

    def reduce_by_code(self, values: Values, codes: np.ndarray, n_codes: int) -> tuple[np.ndarray, list[Any]] | None:
        if n_codes > 4 * len(codes) + 4096:
            return None
        counts = np.bincount(codes, minlength=n_codes)
        present = np.flatnonzero(counts)
        return present, counts[present].tolist()


class Sum(WindowAggregate):
    """The sum of the values (float sums may differ in the last bits with the order of adding)."""

    combining = Combining.INVERTIBLE

    @property
    def merge_function(self) -> Callable[[Any, Any], Any]:
        return operator.add

    def lift(self, value: Any) -> Any:
        return value

    def fold(self, partial: Any, value: Any) -> Any:
        return partial + value

    def merge(self, a: Any, b: Any) -> Any:
        return a + b

    def subtract(self, a: Any, b: Any) -> Any:
        return a - b

    def identity(self) -> Any:
        return 0

    def result(self, partial: Any) -> Any:
        return partial

    def reduce_groups(self, values: Values, order: np.ndarray, bounds: np.ndarray) -> list[Any]:
        array = _numeric(values, order, "sum")
        if array is None:
            return super().reduce_groups(values, order, bounds)
        return np.add.reduceat(array, bounds).tolist()

    def reduce_by_code(self, values: Values, codes: np.ndarray, n_codes: int) -> tuple[np.ndarray, list[Any]] | None:
        return _reduce_at(np.add, values, codes, n_codes, "sum")


class Min(WindowAggregate):
    """The smallest value."""

    def lift(self, value: Any) -> Any:
        return value

    def fold(self, partial: Any, value: Any) -> Any:
        return value if value < partial else partial

    def merge(self, a: Any, b: Any) -> Any:
        return b if b < a else a

    def result(self, partial: Any) -> Any:
        return partial

    def reduce_groups(self, values: Values, order: np.ndarray, bounds: np.ndarray) -> list[Any]:
        array = _numeric(values, order, "min")
        if array is None:
            return super().reduce_groups(values, order, bounds)
        return np.minimum.reduceat(array, bounds).tolist()

    def reduce_by_code(self, values: Values, codes: np.ndarray, n_codes: int) -> tuple[np.ndarray, list[Any]] | None:
        return _reduce_at(np.minimum, values, codes, n_codes, "min")


class Max(WindowAggregate):
    """The largest value."""

    def lift(self, value: Any) -> Any:
        return value

    def fold(self, partial: Any, value: Any) -> Any:
        return value if value > partial else partial

    def merge(self, a: Any, b: Any) -> Any:
        return b if b > a else a

    def result(self, partial: Any) -> Any:
        return partial

    def reduce_groups(self, values: Values, order: np.ndarray, bounds: np.ndarray) -> list[Any]:
        array = _numeric(values, order, "max")
        if array is None:
            return super().reduce_groups(values, order, bounds)
        return np.maximum.reduceat(array, bounds).tolist()

    def reduce_by_code(self, values: Values, codes: np.ndarray, n_codes: int) -> tuple[np.ndarray, list[Any]] | None:
        return _reduce_at(np.maximum, values, codes, n_codes, "max")


@dataclass(frozen=True, slots=True)
class Reduce(WindowAggregate):
    """`fn(a, b)` folded over the values (associative and commutative, returns a new value)."""

    fn: Callable[[Any, Any], Any]

    def lift(self, value: Any) -> Any:
        return value

    def fold(self, partial: Any, value: Any) -> Any:
        return self.fn(partial, value)

    def merge(self, a: Any, b: Any) -> Any:
        return self.fn(a, b)

    def result(self, partial: Any) -> Any:
        return partial


@dataclass(frozen=True, slots=True, init=False)
class Aggregate(WindowAggregate):
    """An accumulator per slice: `create()`, `add(value, acc)`, `merge(a, b)`, `get_result(acc)`.

    The shape of `epochal.AggregateFunction` plus `merge`, which windows need to combine the
    accumulators of their slices; `Aggregate.of(function)` reads those four methods off an object.
    """

    create: Callable[[], Any]
    add: Callable[[Any, Any], Any]
    combine: Callable[[Any, Any], Any]
    get_result: Callable[[Any], Any]

    def __init__(
        self,
        create: Callable[[], Any],
        add: Callable[[Any, Any], Any],
        merge: Callable[[Any, Any], Any],
        get_result: Callable[[Any], Any],
    ) -> None:
        object.__setattr__(self, "create", create)
        object.__setattr__(self, "add", add)
        object.__setattr__(self, "combine", merge)
        object.__setattr__(self, "get_result", get_result)

    @classmethod
    def of(cls, function: Any) -> Aggregate:
        """The aggregate of an object with `create_accumulator`, `add`, `merge` and `get_result`."""
        missing = [m for m in ("create_accumulator", "add", "merge", "get_result") if not hasattr(function, m)]
        if missing:
            raise TypeError(
                f"{type(function).__name__} needs {', '.join(missing)} to aggregate windows "
                "(merge(a, b) combines the accumulators of two slices)"
            )
        return cls(function.create_accumulator, function.add, function.merge, function.get_result)

    def lift(self, value: Any) -> Any:
        return self.add(value, self.create())

    def fold(self, partial: Any, value: Any) -> Any:
        return self.add(value, partial)

    def merge(self, a: Any, b: Any) -> Any:
        return self.combine(a, b)

    def result(self, partial: Any) -> Any:
        return self.get_result(partial)


class Process(WindowAggregate):
    """Keep the window's records: the result is their values in event-time order.

    A partial is a list of `(timestamp, value)`; the result sorts them by time. Records of equal
    time always share a slice (or session), where they are appended in arrival order, and the sort
    is stable, so ties come in arrival order however records were batched or sliced.
    """

    combining = Combining.KEEP_RECORDS

    def lift(self, value: tuple[float, Any]) -> list[tuple[float, Any]]:
        return [value]

    def fold(self, partial: list[tuple[float, Any]], value: tuple[float, Any]) -> list[Any]:
        partial.append(value)  # the slice owns its list
        return partial

    def merge(self, a: list[Any], b: list[Any]) -> list[Any]:
        return a + b

    def result(self, partial: list[tuple[float, Any]]) -> list[Any]:
        return [item[1] for item in sorted(partial, key=_TIME)]


_TIME = operator.itemgetter(0)


def combine_all(aggregate: WindowAggregate, partials: list[Any]) -> Any:
    """The partials combined left to right (None if there are none)."""
    if not partials:
        return None
    return functools.reduce(aggregate.merge, partials)
