"""The local phase's grouping of built-in aggregates by Arrow's own hash aggregation (Acero).

Why it exists: grouping an epoch's words is the one pass that hashes every record, and Arrow's
`group_by` (a vectorized hash table over the key column, the aggregates computed in the same
pass) does it in about half the time of `dictionary_encode` followed by numpy per group (measured
on the Zipf word stream of the `wordcount` benchmark, one thread: 42 against 88 ns a word). It
serves the built-ins whose result it computes exactly as the numpy path does: count, sum, mean
(a sum and a count), and min and max of integers (a float's NaN is ignored by Arrow's min and
max, kept by numpy's, so floats take the numpy path). Anything else returns None: the caller
groups with `dictionary_encode` and `BatchAggregate.add`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pyarrow as pa

from ....plan.aggregates import AggregateKind
from .functions import BatchAggregate

# accumulator → Arrow's hash aggregate, per built-in kind (None: count every row)
_FUNCTIONS: dict[AggregateKind, dict[str, str]] = {
    AggregateKind.COUNT: {"count": "count_all"},
    AggregateKind.SUM: {"sum": "sum"},
    AggregateKind.MEAN: {"sum": "sum", "count": "count_all"},
    AggregateKind.MIN: {"min": "min"},
    AggregateKind.MAX: {"max": "max"},
}


def _plan(schema: pa.Schema, aggregates: Sequence[BatchAggregate]) -> list[tuple[Any, str]] | None:
    """Arrow's aggregations for every accumulator, in order; None if one has none."""
    out: list[tuple[Any, str]] = []
    for agg in aggregates:
        functions = _FUNCTIONS.get(agg.call.kind)
        if functions is None:
            return None
        value = agg.call.value
        for name in agg.names:
            function = functions[name]
            if function == "count_all":
                out.append(([], function))
                continue
            if not isinstance(value, str) or value not in schema.names:
                return None
            kind = schema.field(value).type
            numeric = pa.types.is_integer(kind) or (pa.types.is_floating(kind) and function == "sum")
            if not numeric or pa.types.is_uint64(kind):
                return None
            out.append((value, function))
    return out


def grouped_partials(
    table: pa.Table, column: str, aggregates: Sequence[BatchAggregate]
) -> tuple[pa.Array, list[dict[str, pa.Array]]] | None:
    """`(distinct keys, per aggregate its accumulator columns)` of `table` grouped by `column`
    (nulls a key like any other), or None when an aggregate is not one Arrow computes here."""
    plan = _plan(table.schema, aggregates)
    if plan is None:
        return None
    grouped = table.group_by(column, use_threads=False).aggregate(plan)
    names = grouped.column_names
    key_at = 0 if names[0] == column else len(names) - 1  # the key's place differs across versions
    values = [grouped.column(i) for i in range(len(names)) if i != key_at]
    out: list[dict[str, pa.Array]] = []
    at = 0
    for agg in aggregates:
        acc: dict[str, pa.Array] = {}
        for name in agg.names:
            column_ = values[at].combine_chunks()
            at += 1
            if agg.call.kind is AggregateKind.MEAN and name == "sum":
                column_ = column_.cast(pa.float64())  # as the numpy path's mean: a float sum
            elif column_.type != pa.int64() and column_.type != pa.float64():
                # as the numpy path: int64 or float64 accumulators
                column_ = column_.cast(pa.int64() if pa.types.is_integer(column_.type) else pa.float64())
            acc[name] = column_
        out.append(acc)
    return grouped.column(key_at).combine_chunks(), out
