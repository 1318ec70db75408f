"""What a window operator emits: its results, and the records too late for their windows.

Results go out as `(key, window_start, window_end, result)` (with several named queries,
`(key, query, window_start, window_end, result)`; `window_all` leaves the key out), or, when
the input came as Arrow batches, as an Arrow batch with those columns; records too late for a
window (dissertation §5.2: past the allowed lateness) as `LateRecord`s after the results,
which `late_records()` keeps through a `SplitLateOperator` (or, if nobody asked, which are
counted and dropped).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import pyarrow as pa

from ...plan.specs import KeyedWindowSpec, OutputPart, SplitLateSpec, WindowFunctionKind
from ..windowing import FiredWindow
from ..wire.batches import columns_of
from ..wire.elements import Batch
from .bad_records import dead_letters_part, records_part
from .base import RuntimeOperator


class LateRecord(NamedTuple):
    """A record that came after its windows closed, and the queries it was too late for."""

    record: Any
    queries: tuple[str, ...]


class WindowOutput:
    """The output of one window operator: tuples, or Arrow batches while the input is Arrow and
    the results fit (`arrow_results`)."""

    def __init__(self, spec: KeyedWindowSpec) -> None:
        self.key = spec.key
        self.named = spec.named
        self.keyless = spec.keyless
        self.emit_late = spec.emit_late
        self.columnar = False  # Arrow in: results go out as Arrow batches
        self.arrow_results = spec.kind is not WindowFunctionKind.PROCESS  # until one does not fit
        self.result_column = spec.kind.value if spec.kind.value in ("count", "sum", "min", "max") else "result"

    @property
    def wants_arrow(self) -> bool:
        return self.columnar and self.arrow_results

    def add_windows(self, results: list[Any], key: Any, fired: list[FiredWindow]) -> None:
        """One key's fired windows as result tuples (without the key for `window_all`)."""
        if self.keyless:
            if self.named:
                results.extend((f.query, f.start, f.end, f.result) for f in fired)
            else:
                results.extend((f.start, f.end, f.result) for f in fired)
        elif self.named:
            results.extend((key, f.query, f.start, f.end, f.result) for f in fired)
        else:
            results.extend((key, f.start, f.end, f.result) for f in fired)

    @staticmethod
    def late_rows(batch: pa.RecordBatch, rows: Any, queries: list[tuple[str, ...]]) -> list[LateRecord]:
        """The rows `rows` of an Arrow batch as late records (a row as the per-record path has it)."""
        taken = batch.take(pa.array(rows)).to_pylist()
        return [LateRecord(tuple(r.values()) if len(r) > 1 else next(iter(r.values())), q)
                for r, q in zip(taken, queries)]

    def batch(self, results: list[Any], late: list[Any]) -> Batch | None:
        """The output batch of `results` and `late` records (dropped unless asked for)."""
        if late and not self.emit_late:  # nobody asked for them: counted, then dropped
            late = []
        if not results and not late:
            return None
        if results and type(results[-1]) is pa.RecordBatch:  # columnar mode's results (always last)
            if len(results) == 1 and not late:
                batch: pa.RecordBatch = results[0]
                return batch
            results = [t for r in results for t in (self._arrow_rows(r) if type(r) is pa.RecordBatch else [r])]
            return results + late
        if self.columnar and self.arrow_results and results and not late:
            try:
                return self._as_arrow(results)
            except (pa.ArrowInvalid, pa.ArrowTypeError):  # results Arrow cannot hold (e.g. tuples of
                self.arrow_results = False  # mixed types from reduce/aggregate): tuples from now on
        return results + late

    @staticmethod
    def _arrow_rows(batch: pa.RecordBatch) -> list[tuple[Any, ...]]:
        """A batch of results as the tuples the per-record path emits."""
        return list(zip(*(c.to_pylist() for c in batch.columns)))

    def _as_arrow(self, results: list[Any]) -> pa.RecordBatch:
        assert isinstance(self.key, str)
        names = [self.key, *(["window"] if self.named else []), "window_start", "window_end", self.result_column]
        return pa.RecordBatch.from_arrays([pa.array(c) for c in columns_of(results, len(names))], names=names)


class SplitLateOperator(RuntimeOperator):
    """Keeps one part of an operator's output: a window operator's results or late records
    (unwrapped), or an operator's records or dead letters (`OutputPart`)."""

    def __init__(self, spec: SplitLateSpec) -> None:
        super().__init__(spec)
        self.part = spec.part
        self.keep_late = spec.part is OutputPart.LATE

    def process(self, batch: Batch) -> Batch | None:
        part = self.part
        if part is OutputPart.RECORDS:
            return records_part(batch)
        if part is OutputPart.DEAD_LETTERS:
            return dead_letters_part(batch)
        return late_part(batch, self.keep_late)


def late_part(batch: Batch, keep_late: bool) -> Batch | None:
    """The results (or the late records, unwrapped) of a window operator's output batch."""
    if isinstance(batch, pa.RecordBatch):
        return None if keep_late else batch
    if keep_late:
        out = [r.record for r in batch if type(r) is LateRecord]
    else:
        out = [r for r in batch if type(r) is not LateRecord]
    return out or None
