"""The local phase of a window aggregation: one partial row per key and slice, before the exchange.

Periodic window queries (`Tumbling`, `Sliding`) cut event time into fixed slices (dissertation
§5.3.1): every window is a run of whole slices, so the records of one key in one slice can be
folded together before the key exchange without changing any window's result. This operator
holds the Arrow batches it is given (records are turned into one first), and when it ships it
finds each row's slice (`SliceEdges.slices_of`, the global phase's own edges) and groups the rows
by key and slice with one hash aggregation (Arrow's, in C++): out goes a batch with the key
column, the slice's start in the event-time column, the number of records each row stands for
(`WINDOW_WEIGHT`) and the count, sum, minimum or maximum of the value column.

It ships before every watermark it forwards (`on_watermark`: the global phase sees a slice's
partial before the watermark that could close its windows, so nothing becomes late that was not
late), before every checkpoint barrier (it keeps no state), at the end of the input, and when it
holds `max_rows` rows or `max_bytes` bytes. A partial row behind the watermark is judged late or
not for the slice it stands for, which holds for every record in it: every window holding one
holds the slice.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from ....errors import RecordError
from ....plan.aggregates import WINDOW_WEIGHT, LocalWindowSpec
from ....plan.specs import WindowFunctionKind
from ....plan.time import TimestampError
from ...windowing.aggregates import Count
from ...windowing.engine import Windowing
from ...wire.batches import to_arrow
from ...wire.elements import Batch
from ..base import OperatorSnapshot, RuntimeOperator

_SLICE = "__slice"
_FUNCTIONS = {WindowFunctionKind.SUM: "sum", WindowFunctionKind.MIN: "min", WindowFunctionKind.MAX: "max"}


class LocalWindowOperator(RuntimeOperator):
    """Partials per key and slice until the next watermark or barrier; see the module docstring."""

    def __init__(self, spec: LocalWindowSpec) -> None:
        super().__init__(spec)
        self.key = spec.key
        self.event_time = spec.event_time
        assert isinstance(spec.event_time.field, str)
        self.time_column: str = spec.event_time.field
        self.value = spec.value
        self.function = _FUNCTIONS.get(spec.kind)
        grid = Windowing(dict(spec.queries), Count()).grid
        assert grid is not None, "a local window phase needs periodic queries"
        self.edges = grid.edges
        self.max_rows = spec.max_rows
        self.max_bytes = spec.max_bytes
        self._held: list[pa.RecordBatch] = []
        self._rows = 0
        self._bytes = 0

    def process(self, batch: Batch) -> Batch | None:
        arrow = batch if isinstance(batch, pa.RecordBatch) else to_arrow(batch)
        columns = [self.key, self.time_column] + ([self.value] if self.value is not None else [])
        missing = [c for c in columns if c not in arrow.schema.names]
        if missing:
            raise RecordError(self.name, f"<batch with columns {arrow.schema.names}>",
                              KeyError(f"no column {missing[0]!r}"), self.position())
        held = arrow.select(columns)
        self._held.append(held)
        self._rows += held.num_rows
        self._bytes += held.nbytes
        return self._ship() if self._rows >= self.max_rows or self._bytes >= self.max_bytes else None

    def _ship(self) -> pa.RecordBatch | None:
        held, self._held, self._rows, self._bytes = self._held, [], 0, 0
        if not held:
            return None
        table = pa.Table.from_batches(held).combine_chunks()
        rows = table.to_batches()[0] if table.num_rows else None
        if rows is None:
            return None
        try:
            ts = self.event_time.of_arrow(rows)
        except TimestampError as exc:
            raise RecordError(self.name, f"<batch of {rows.num_rows} rows>", exc, self.position()) from exc
        index, starts, _ = self.edges.slices_of(ts)
        keyed = pa.table({self.key: rows.column(self.key), _SLICE: pa.array(starts[index], pa.float64()),
                          **({self.value: rows.column(self.value)} if self.value is not None else {})})
        aggregations: list[Any] = [([], "count_all")]
        if self.value is not None and self.function is not None:
            aggregations.append((self.value, self.function))
        grouped = keyed.group_by([self.key, _SLICE], use_threads=False).aggregate(aggregations)
        columns = [grouped.column(self.key), grouped.column(_SLICE), grouped.column("count_all")]
        names = [self.key, self.time_column, WINDOW_WEIGHT]
        if self.value is not None and self.function is not None:
            columns.append(grouped.column(f"{self.value}_{self.function}"))
            names.append(self.value)
        out = pa.Table.from_arrays(columns, names=names).combine_chunks().to_batches()
        return out[0] if out else None

    def on_watermark(self, watermark: float) -> Batch | None:
        return self._ship()

    def pre_barrier(self, checkpoint_id: int) -> Batch | None:
        return self._ship()

    def end_input(self) -> Batch | None:
        return self._ship()

    def snapshot(self, checkpoint_id: int) -> OperatorSnapshot:
        if self._rows:  # the barrier's flush shipped everything: rows held here now are a bug
            raise RuntimeError(f"local window phase {self.name!r} holds {self._rows} rows at a snapshot")
        return OperatorSnapshot()


def weights_of(batch: pa.RecordBatch) -> np.ndarray | None:
    """The records each row of a batch of window partials stands for (None: rows are records)."""
    if WINDOW_WEIGHT not in batch.schema.names:
        return None
    return np.asarray(batch.column(WINDOW_WEIGHT).to_numpy(zero_copy_only=False), dtype=np.int64)
