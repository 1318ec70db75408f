"""The batch functions a SQL job's operators run: module-level classes, so they pickle (Spark)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from .expressions import Expr, evaluate

__all__ = ["Project", "conform", "Positional"]


def conform(batch: pa.RecordBatch, schema: pa.Schema) -> pa.RecordBatch:
    """`batch` with exactly `schema`'s columns, cast to its types (a view's input, as declared)."""
    if batch.schema.equals(schema):
        return batch
    missing = [n for n in schema.names if n not in batch.schema.names]
    if missing:
        raise ValueError(f"the record has no column {missing[0]!r} of the view's schema (it has {batch.schema.names})")
    arrays = [batch.column(n).cast(f.type) for n, f in zip(schema.names, schema)]
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


@dataclass(frozen=True, slots=True)
class Project:
    """One SELECT over batches: cast to `schema` (a view's input), keep the rows `where` holds
    for, compute `outputs`. Every step is pyarrow.compute over the whole batch."""

    schema: pa.Schema | None
    where: Expr | None
    names: tuple[str, ...]
    outputs: tuple[Expr, ...]
    positional: tuple[str, ...] = ()  # name the input's columns by position first (an operator's output)

    def __call__(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        if self.positional:
            batch = Positional(self.positional)(batch)
        if self.schema is not None:
            batch = conform(batch, self.schema)
        if self.where is not None:
            mask = self.where(batch)
            if isinstance(mask, pa.Scalar):
                mask = pa.repeat(mask, batch.num_rows)
            batch = batch.filter(pc.fill_null(mask, False))
        arrays = [evaluate(e, batch) for e in self.outputs]
        return pa.RecordBatch.from_arrays(arrays, names=list(self.names))


@dataclass(frozen=True, slots=True)
class Positional:
    """Names a batch's columns by position (window results come as `<key>, window_start, ...`
    batches, or as tuples that arrive as `f0, f1, ...`)."""

    names: tuple[str, ...]

    def __call__(self, batch: Any) -> pa.RecordBatch:
        if batch.num_columns != len(self.names):
            raise ValueError(f"expected {len(self.names)} columns {self.names}, got {batch.schema.names}")
        return pa.RecordBatch.from_arrays(list(batch.columns), names=list(self.names))
