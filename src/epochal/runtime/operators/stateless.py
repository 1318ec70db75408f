"""Stateless operators: a user function per record or per batch, and union.

Under `on_error="fail"` (the default) a user function runs in one loop per batch whose only
guard is a `try` around the whole loop. Under `skip` or `dead_letter` a per-record loop with a
`try` each runs instead; map_batches keeps calling its function on whole batches and, when one
fails, halves it until the rows that fail are found (`MapBatchesOperator._bisect`).
"""

from __future__ import annotations

import math
from typing import Any

import pyarrow as pa

from ...errors import OperatorError, RecordError
from ...plan.specs import MapBatchesSpec, OnError, RecordFnKind, RecordFnSpec
from ..wire.batches import batch_len, to_arrow, to_records
from ..wire.elements import Batch
from .bad_records import DeadLetter, with_letters
from .base import OperatorContext, RuntimeOperator, batch_repr
from .function_pool import FunctionPool
from .lifecycle import UserFunctions, rich_functions


class RecordFnOperator(RuntimeOperator):
    """map, filter and flat_map: a user function per record."""

    def __init__(self, spec: RecordFnSpec) -> None:
        super().__init__(spec)
        self.fn = spec.fn
        self.kind = spec.kind
        self.on_error = spec.on_error
        self._tolerant = spec.on_error is not OnError.FAIL
        if rich := rich_functions(spec.fn):
            self.functions = UserFunctions(self.name, rich)
        self.processes = spec.processes
        self.pool: FunctionPool | None = None

    def open(self, ctx: OperatorContext) -> None:
        super().open(ctx)
        if self.processes:
            self.pool = FunctionPool(self.fn, self.processes, self.kind.value)

    def resize(self, processes: int) -> None:
        """Vertical elasticity: run the function in `processes` processes from the next batch on."""
        if self.pool is None:
            raise ValueError(f"operator {self.name!r} runs its function in line, not in a process pool")
        self.pool.resize(processes)
        self.processes = processes

    def pool_ready(self) -> int:
        """How many processes of its pool run the function now (loaded it): the size in effect."""
        return self.pool.poll_ready() if self.pool is not None else 0

    def close(self) -> None:
        try:
            if self.pool is not None:
                self.pool.close()
        finally:
            super().close()  # the rich function's close

    def process(self, batch: Batch) -> Batch | None:
        if self.pool is not None:
            return self._process_in_pool(self.pool, batch)
        if self._tolerant:
            return self._process_tolerant(batch)
        fn = self.fn
        out: list[Any] = []
        record = None
        try:
            if self.kind is RecordFnKind.MAP:
                append = out.append
                for record in to_records(batch):
                    append(fn(record))
            elif self.kind is RecordFnKind.FILTER or self.kind is RecordFnKind.KEY_CHECK:
                append = out.append
                for record in to_records(batch):
                    if fn(record):
                        append(record)
            else:
                extend = out.extend
                for record in to_records(batch):
                    extend(fn(record))
        except Exception as exc:
            raise self.record_error(record, exc) from exc
        return out

    def _process_in_pool(self, pool: FunctionPool, batch: Batch) -> Batch | None:
        if pool.fn is not self.fn:  # a live patch switched the function
            pool.set_function(self.fn)
        records = to_records(batch)
        answer = pool.apply(records, self._tolerant)
        if answer[0] == "error":
            raise self.record_error(records[answer[1]], answer[2]) from answer[2]
        out, failures = answer[1], answer[2]
        if not failures:
            return out
        letters: list[DeadLetter] = []
        for index, exc in failures:
            self.reject(records[index], exc, letters)
        return with_letters(out, letters)

    def _process_tolerant(self, batch: Batch) -> Batch | None:
        """One `try` per record: a record the function fails on is skipped or dead-lettered."""
        fn, reject = self.fn, self.reject
        out: list[Any] = []
        letters: list[DeadLetter] = []
        append = out.append
        if self.kind is RecordFnKind.KEY_CHECK and isinstance(batch, pa.RecordBatch):
            column = getattr(fn, "key", None)
            if isinstance(column, str):  # keyed by a column: the batch has it, or no row has a key
                if column in batch.schema.names:
                    return batch
                for record in batch.to_pylist():
                    reject(record, KeyError(column), letters)
                return with_letters(None, letters)
        if self.kind is RecordFnKind.MAP:
            for record in to_records(batch):
                try:
                    append(fn(record))
                except Exception as exc:
                    reject(record, exc, letters)
        elif self.kind is RecordFnKind.FILTER or self.kind is RecordFnKind.KEY_CHECK:
            for record in to_records(batch):
                try:
                    if fn(record):
                        append(record)
                except Exception as exc:
                    reject(record, exc, letters)
        else:
            extend = out.extend
            for record in to_records(batch):
                try:
                    produced = fn(record)
                    if type(produced) is not list and type(produced) is not tuple:
                        produced = list(produced)  # a generator may raise half-way: all or nothing
                    extend(produced)
                except Exception as exc:
                    reject(record, exc, letters)
        return with_letters(out, letters)


class MapBatchesOperator(RuntimeOperator):
    """A user function per batch, handed a `pyarrow.RecordBatch`.

    Under `skip` or `dead_letter` a batch the function fails on is cut in halves, and each half
    run again, until the failing rows are single rows: those are skipped or dead-lettered, the
    rest is computed on sub-batches. A bad row costs about 2·log2(batch size) more calls, on
    ever smaller batches; a batch without bad rows costs nothing more. The outputs of the
    pieces are concatenated, which equals the output for the whole batch when the function maps
    rows independently (a function that aggregates over its batch sees smaller batches then).
    """

    def __init__(self, spec: MapBatchesSpec) -> None:
        super().__init__(spec)
        self.fn = spec.fn
        self.on_error = spec.on_error
        self.tick = spec.watermark_tick
        if rich := rich_functions(spec.fn):
            self.functions = UserFunctions(self.name, rich)

    def output_watermark(self, watermark: float) -> float:
        """Held at the start of its tick, when the spec says so (see `MapBatchesSpec`)."""
        if self.tick is None or not math.isfinite(watermark):
            return watermark
        return math.floor(watermark / self.tick) * self.tick

    def process(self, batch: Batch) -> Batch | None:
        try:
            return self._apply(batch)
        except Exception as exc:
            if self.on_error is OnError.FAIL:
                raise
            first_error = exc
        return self._process_tolerant(batch, first_error)

    def _apply(self, batch: Batch) -> Batch | None:
        """The function's output for `batch`; raises a `RecordError` naming the batch."""
        try:
            arrow = to_arrow(batch)
        except Exception as exc:
            raise self.batch_error(batch_repr(batch), exc) from exc
        try:
            result = self.fn(arrow)
        except Exception as exc:
            raise self.batch_error(batch_repr(arrow), exc) from exc
        if isinstance(result, pa.Table):
            result = result.combine_chunks()
            batches = result.to_batches()
            return batches[0] if batches else None
        if result is None or isinstance(result, (pa.RecordBatch, list)):
            return result
        raise self.batch_error(
            f"<batch of {arrow.num_rows} rows>",
            TypeError(f"map_batches function returned {type(result).__name__}, not a RecordBatch"),
        )

    def batch_error(self, what: str, cause: BaseException) -> RecordError:
        """User code (or the conversion to Arrow) failed on a batch: deterministic, like a record."""
        return RecordError(self.name, what, cause, self.position())

    def _process_tolerant(self, batch: Batch, error: Exception) -> Batch | None:
        pieces: list[Batch] = []
        letters: list[DeadLetter] = []
        n = batch_len(batch)
        if n == 1:
            self._reject_row(batch, error, letters)
        else:
            self._bisect(_rows(batch, 0, n // 2), pieces, letters)
            self._bisect(_rows(batch, n // 2, n), pieces, letters)
        return with_letters(_concat(pieces), letters)

    def _bisect(self, batch: Batch, pieces: list[Batch], letters: list[DeadLetter]) -> None:
        try:
            out = self._apply(batch)
        except Exception as exc:
            n = batch_len(batch)
            if n <= 1:
                self._reject_row(batch, exc, letters)
                return
            self._bisect(_rows(batch, 0, n // 2), pieces, letters)
            self._bisect(_rows(batch, n // 2, n), pieces, letters)
            return
        if out is not None and batch_len(out):
            pieces.append(out)

    def _reject_row(self, row: Batch, error: Exception, letters: list[DeadLetter]) -> None:
        record = row.to_pylist()[0] if isinstance(row, pa.RecordBatch) else row[0]
        cause = error.cause if isinstance(error, OperatorError) and error.cause is not None else error
        self.reject(record, cause, letters)


def _rows(batch: Batch, start: int, stop: int) -> Batch:
    return batch.slice(start, stop - start) if isinstance(batch, pa.RecordBatch) else batch[start:stop]


def _concat(pieces: list[Batch]) -> Batch | None:
    """One batch of the pieces' rows: Arrow if every piece is and their schemas unify, else records."""
    if not pieces:
        return None
    if len(pieces) == 1:
        return pieces[0]
    if all(isinstance(p, pa.RecordBatch) for p in pieces):
        try:
            tables = [pa.Table.from_batches([p]) for p in pieces]
            joined = pa.concat_tables(tables, promote_options="default").combine_chunks().to_batches()
            return joined[0] if joined else None
        except (pa.ArrowInvalid, pa.ArrowTypeError):
            pass
    return [r for p in pieces for r in to_records(p)]


class UnionOperator(RuntimeOperator):
    """Records of every input pass unchanged."""
