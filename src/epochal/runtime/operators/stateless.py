"""Stateless operators: a user function per record or per batch, and union."""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from ...errors import OperatorError
from ...plan.specs import MapBatchesSpec, RecordFnKind, RecordFnSpec
from ..batches import to_arrow, to_records
from ..elements import Batch
from .base import RuntimeOperator, batch_repr


class RecordFnOperator(RuntimeOperator):
    """map, filter and flat_map: a user function per record."""

    def __init__(self, spec: RecordFnSpec) -> None:
        super().__init__(spec)
        self.fn = spec.fn
        self.kind = spec.kind

    def process(self, batch: Batch) -> Batch | None:
        fn = self.fn
        out: list[Any] = []
        record = None
        try:
            if self.kind is RecordFnKind.MAP:
                append = out.append
                for record in to_records(batch):
                    append(fn(record))
            elif self.kind is RecordFnKind.FILTER:
                append = out.append
                for record in to_records(batch):
                    if fn(record):
                        append(record)
            else:
                extend = out.extend
                for record in to_records(batch):
                    extend(fn(record))
        except Exception as exc:
            raise OperatorError(self.name, record, exc) from exc
        return out


class MapBatchesOperator(RuntimeOperator):
    """A user function per batch, handed a `pyarrow.RecordBatch`."""

    def __init__(self, spec: MapBatchesSpec) -> None:
        super().__init__(spec)
        self.fn = spec.fn

    def process(self, batch: Batch) -> Batch | None:
        try:
            arrow = to_arrow(batch)
        except Exception as exc:
            raise OperatorError(self.name, batch_repr(batch), exc) from exc
        try:
            result = self.fn(arrow)
        except Exception as exc:
            raise OperatorError(self.name, batch_repr(arrow), exc) from exc
        if isinstance(result, pa.Table):
            result = result.combine_chunks()
            batches = result.to_batches()
            return batches[0] if batches else None
        if result is None or isinstance(result, (pa.RecordBatch, list)):
            return result
        raise OperatorError(
            self.name,
            f"<batch of {arrow.num_rows} rows>",
            TypeError(f"map_batches function returned {type(result).__name__}, not a RecordBatch"),
        )


class UnionOperator(RuntimeOperator):
    """Records of every input pass unchanged."""

