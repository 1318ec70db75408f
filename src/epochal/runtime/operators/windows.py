"""The keyed window operator: Cutty's shared slices (dissertation ch. 5) in keyed state.

Each key's windows live in one `SliceStore` (`runtime.windowing`), kept as keyed state, so a
key's windows are checkpointed, restored, rescaled and moved with its key group like any state.
One event-time timer per key, at the store's next fire time, is what the windowing contract asks
for: when the watermark reaches it, the key's due windows fire. A late record within the allowed
lateness makes its store due at once: its windows fire again at the next watermark (or, after the
input ended, at the end of its batch), so the output does not depend on how records are batched.
Records arrive one at a time (`Windowing.add`) or as whole Arrow batches (`Windowing.add_columns`,
vectorized: no Python call per record for count, sum, min and max).

Columnar mode (`window_table`): periodic queries with a count, sum, min or max whose first input
is an Arrow batch keep every key's slices in one `SliceTable` instead (one row per key, one
column per slice), written into keyed state per key group before each snapshot; a watermark
fires every due window of every key in one vectorized pass, with no timer per key.

Output: results as `(key, window_start, window_end, result)` (with several named queries,
`(key, query, window_start, window_end, result)`), or on the columnar path an Arrow batch with
those columns; records too late for a window as `LateRecord`s, which `late_records()` keeps (or,
if nobody asked, which are counted and dropped).

Bad records (`on_error`): a record whose event time or value cannot be read, or that the
window's reduce or aggregate function fails on while it is added, is skipped or dead-lettered
one by one; so is a window a process window function fails on. On the Arrow path only the event
times are checked row by row: an error while a batch's columns are added, or while windows fire
(an aggregate's merge or get_result), fails the attempt under every policy, since the key's
windows may be half updated and cannot be taken back.

About 465 lines, past the usual 450: both modes share the operator's record, watermark, error
and output handling; the columnar mode's state lives in `window_table`.
"""

from __future__ import annotations

import math
import operator
from enum import Enum
from typing import Any, NamedTuple

import pyarrow as pa

from ...errors import RecordError
from ...plan.specs import KeyedWindowSpec, OnError, OutputPart, SplitLateSpec, WindowFunctionKind
from ...plan.time import TimestampError
from ...state.keygroups import KeyGroups, key_group_of
from ...state.sections import GroupCopies
from ..keys import batch_keys
from ..watermarks import END_OF_TIME, NO_WATERMARK
from ..windowing import Admission, Aggregate, Count, FiredWindow, Max, Min, Process, Reduce, Sum, Windowing
from ..wire.batches import to_records
from ..wire.elements import Batch
from .aggregates.local_windows import weights_of
from .bad_records import DeadLetter, dead_letters_part, records_part, with_letters
from .base import OperatorContext, OperatorSnapshot, RuntimeOperator, batch_timestamps, timed_rows
from .keyed import KeyedOperator
from .timers import KeyedTimers, TimeDomain
from .window_table import TableWindows, table_reduction

_STORE = "__window__"
_EVENT = TimeDomain.EVENT_TIME
_COUNT = WindowFunctionKind.COUNT


class WindowMode(Enum):
    """Where an operator subtask keeps its windows."""

    UNDECIDED = "undecided"  # no input yet: the first batch decides
    STORES = "stores"  # one SliceStore and one event-time timer per key
    TABLE = "table"  # one SliceTable for the subtask (window_table)


class Window(NamedTuple):
    """The window a process window function is called for: `[start, end)` of query `query`."""

    query: str
    start: float
    end: float


class LateRecord(NamedTuple):
    """A record that came after its windows closed, and the queries it was too late for."""

    record: Any
    queries: tuple[str, ...]


def _aggregate(spec: KeyedWindowSpec) -> Any:
    kind = spec.kind
    if kind is WindowFunctionKind.COUNT:
        return Count()
    if kind is WindowFunctionKind.SUM:
        return Sum()
    if kind is WindowFunctionKind.MIN:
        return Min()
    if kind is WindowFunctionKind.MAX:
        return Max()
    if kind is WindowFunctionKind.REDUCE:
        return Reduce(spec.function)
    if kind is WindowFunctionKind.AGGREGATE:
        return Aggregate.of(spec.function)
    return Process()


class KeyedWindowOperator(KeyedOperator):
    """Window queries per key on shared slices, fired by event-time timers."""

    def __init__(self, spec: KeyedWindowSpec) -> None:
        super().__init__(spec)
        self.spec = spec
        self.key = spec.key
        self.event_time = spec.event_time
        self.windowing = Windowing(dict(spec.queries), _aggregate(spec), spec.allowed_lateness)
        value = spec.value
        self.value_of = operator.itemgetter(value) if isinstance(value, (str, int)) else value
        self.watermark = NO_WATERMARK
        self.late_records = 0  # records too late for some window (a metric), kept or dropped
        self.on_error = spec.on_error
        self._columnar = False  # Arrow in: results go out as Arrow batches
        self._arrow_results = spec.kind is not WindowFunctionKind.PROCESS  # until one does not fit
        self._result_column = spec.kind.value if spec.kind.value in ("count", "sum", "min", "max") else "result"
        self._reduction = table_reduction(spec)
        self._mode = WindowMode.UNDECIDED if self._reduction is not None else WindowMode.STORES
        if spec.combined:  # partials from a local phase: only the slice table merges them
            assert self._reduction is not None, "a combined window operator needs the columnar table"
            self._mode = WindowMode.TABLE
        self._table: TableWindows | None = None

    def open(self, ctx: OperatorContext) -> None:
        super().open(ctx)
        self.timers = KeyedTimers(self.backend)
        if self._reduction is not None:
            self._table = TableWindows(self.windowing, self._reduction, self.backend)

    def restore(self, keyed: dict[int, dict[str, dict[Any, Any]]] | None, states: list[Any]) -> None:
        super().restore(keyed, states)
        self.timers.restore()
        if self._table is not None and self._table.reload():
            self._mode = WindowMode.TABLE
            self._columnar = True
        elif self._mode is WindowMode.UNDECIDED and next(iter(self.backend.keys(_STORE)), None) is not None:
            self._mode = WindowMode.STORES

    def reassign(self, owned: KeyGroups, gained: dict[int, dict[str, dict[Any, Any]]],
                 copies: GroupCopies | None = None) -> None:
        """Key groups moved (live migration): the table goes into keyed state first, so the
        key groups that leave take their windows along, and `restore` rebuilds it from there."""
        if self._mode is WindowMode.TABLE:
            assert self._table is not None
            self._table.flush()
        super().reassign(owned, gained, copies)

    def snapshot(self, checkpoint_id: int) -> OperatorSnapshot:
        if self._mode is WindowMode.TABLE:
            assert self._table is not None
            self._table.flush()
        return super().snapshot(checkpoint_id)

    def query(self, key: Any) -> dict[str, Any]:
        found = super().query(key)
        if self._mode is WindowMode.TABLE:
            assert self._table is not None
            store = self._table.query(key)
            if store is not None:
                found[_STORE] = store
        return found

    # -- records -----------------------------------------------------------------------------
    def process(self, batch: Batch) -> Batch | None:
        if (
            isinstance(batch, pa.RecordBatch)
            and isinstance(self.key, str)
            and self.event_time.fn is None
            # the aggregate reads a value column, nothing (a count), or the whole record (a row
            # as a tuple, as the per-record path sees it); a function of the record runs per record
            and (isinstance(self.spec.value, str) or self.spec.value is None)
        ):
            self._columnar = True
            if self._mode is WindowMode.UNDECIDED:
                assert self._reduction is not None
                values = batch.column(self.spec.value) if isinstance(self.spec.value, str) else None
                self._mode = WindowMode.TABLE if TableWindows.accepts(self._reduction, values) else WindowMode.STORES
            if self._mode is WindowMode.TABLE:
                return self._process_table(batch)
            return self._process_arrow(batch)
        if self._mode is WindowMode.TABLE:
            return self._process_table(batch)
        self._mode = WindowMode.STORES
        if self.on_error is not OnError.FAIL:
            return self._process_records_tolerant(batch)
        return self._process_records(batch)

    def _process_records(self, batch: Batch) -> Batch | None:
        records, keys, groups = batch_keys(batch, self.key, self.ctx.max_parallelism, self.name)
        backend, windowing, event_time, value_of = self.backend, self.windowing, self.event_time, self.value_of
        new_store, add, watermark = windowing.new_store, windowing.add, self.watermark
        late: list[Any] = []
        record = None
        try:
            for record, key, group in zip(records, keys, groups):
                ts = event_time.of_record(record)
                backend.set_current_key(key, group)
                store = backend.get_mutable(_STORE, new_store)
                before = store.next_fire
                admission = add(store, ts, record if value_of is None else value_of(record), watermark)
                if admission is Admission.LATE or admission is Admission.PARTLY_LATE:
                    late.append(LateRecord(record, windowing.late_queries(store, ts, watermark)))
                self._retime(before, store.next_fire)  # a late update makes the store due now
        except RecordError:
            raise
        except (TimestampError, Exception) as exc:
            raise self.record_error(record, exc) from exc
        return self._out(self._late_updates(), late)

    def _process_records_tolerant(self, batch: Batch) -> Batch | None:
        """`_process_records` with a `try` per record: a record whose time or value cannot be
        read, or that the aggregate fails on, is skipped or dead-lettered."""
        records, keys, groups = batch_keys(batch, self.key, self.ctx.max_parallelism, self.name)
        backend, windowing, event_time, value_of = self.backend, self.windowing, self.event_time, self.value_of
        new_store, add, watermark = windowing.new_store, windowing.add, self.watermark
        late: list[Any] = []
        letters: list[DeadLetter] = []
        for record, key, group in zip(records, keys, groups):
            try:
                ts = event_time.of_record(record)
                value = record if value_of is None else value_of(record)
            except Exception as exc:
                self.reject(record, exc, letters)
                continue
            backend.set_current_key(key, group)
            store = backend.get_mutable(_STORE, new_store)
            before = store.next_fire
            try:
                admission = add(store, ts, value, watermark)
            except Exception as exc:
                self.reject(record, exc, letters)
                if windowing.is_empty(store):  # the key's first record: leave no empty store
                    backend.delete(_STORE)
                else:
                    self._retime(before, store.next_fire)
                continue
            if admission is Admission.LATE or admission is Admission.PARTLY_LATE:
                late.append(LateRecord(record, windowing.late_queries(store, ts, watermark)))
            self._retime(before, store.next_fire)
        return with_letters(self._out(self._late_updates(), late), letters)

    def _process_arrow(self, batch: pa.RecordBatch) -> Batch | None:
        assert isinstance(self.key, str)
        backend, windowing = self.backend, self.windowing
        max_p = self.ctx.max_parallelism
        letters: list[DeadLetter] = []
        kept, times = self._timed(batch, letters)
        assert isinstance(kept, pa.RecordBatch)
        if not kept.num_rows:
            return with_letters(self._out(self._late_updates(), []), letters)
        batch = kept
        values: Any = None  # a count reads nothing
        if isinstance(self.spec.value, str):
            values = batch.column(self.spec.value)
        elif self.spec.kind is not _COUNT:  # the records themselves, as the per-record path has them
            values = to_records(batch)
        stores: dict[Any, tuple[Any, int, float]] = {}

        def get_store(key: Any) -> Any:
            group = key_group_of(key, max_p)
            backend.set_current_key(key, group)
            store = backend.get_mutable(_STORE, windowing.new_store)
            stores[key] = (store, group, store.next_fire)
            return store

        try:
            admission = windowing.add_columns(get_store, batch.column(self.key), times, values, self.watermark)
        except Exception as exc:
            raise self.record_error(f"<batch of {batch.num_rows} rows>", exc) from exc
        for key, (store, group, before) in stores.items():
            backend.set_current_key(key, group)
            backend.put(_STORE, store)  # a write-back backend (disk) keeps only what is put
            self._retime(before, store.next_fire)
        results = self._late_updates()
        late: list[Any] = []
        if len(admission.late_rows):
            rows = batch.take(pa.array(admission.late_rows)).to_pylist()
            late = [LateRecord(tuple(r.values()) if len(r) > 1 else next(iter(r.values())), q)
                    for r, q in zip(rows, admission.late_queries)]
        return with_letters(self._out(results, late), letters)

    def _process_table(self, batch: Batch) -> Batch | None:
        """Columnar mode: an Arrow batch, or a record list turned into the same columns."""
        table = self._table
        assert table is not None and isinstance(self.key, str)
        letters: list[DeadLetter] = []
        batch, times = self._timed(batch, letters)
        arrow = isinstance(batch, pa.RecordBatch)
        records: list[Any] = []
        try:
            if isinstance(batch, pa.RecordBatch):
                values = batch.column(self.spec.value) if isinstance(self.spec.value, str) else None
                admission = table.add_arrow(batch.column(self.key), times, values, self.watermark,
                                            weights_of(batch) if self.spec.combined else None)
            else:
                records, keys, _ = batch_keys(batch, self.key, self.ctx.max_parallelism, self.name)
                value_of = self.value_of
                admission = table.add_records(keys, times, None if value_of is None else
                                              [value_of(r) for r in records], self.watermark)
        except RecordError:
            raise
        except Exception as exc:
            raise self.record_error(f"<batch of {len(times)} rows>", exc) from exc
        late: list[Any] = []
        if len(admission.late_rows):
            if arrow:
                assert isinstance(batch, pa.RecordBatch)
                rows = batch.take(pa.array(admission.late_rows)).to_pylist()
                late = [LateRecord(tuple(r.values()) if len(r) > 1 else next(iter(r.values())), q)
                        for r, q in zip(rows, admission.late_queries)]
            else:
                late = [LateRecord(records[i], q) for i, q in zip(admission.late_rows.tolist(), admission.late_queries)]
        results = self._late_updates()
        return with_letters(self._out(results, late), letters)

    def _timed(self, batch: Batch, letters: list[DeadLetter]) -> tuple[Batch, Any]:
        """The batch and its event times; under a tolerant `on_error`, rows whose time cannot be
        read are rejected (skipped, or dead-lettered into `letters`) and left out of both."""
        try:
            return batch, batch_timestamps(self.name, self.event_time, batch, self.position())
        except RecordError:
            if self.on_error is OnError.FAIL:
                raise
            kept, times, bad = timed_rows(self.event_time, batch)
            for record, exc in bad:
                self.reject(record, exc, letters)
            return kept, times

    def _late_updates(self) -> list[Any]:
        """Windows late records changed fire again at the next watermark; once the watermark is
        at the end of time, none comes: they fire at the end of this batch."""
        results: list[Any] = []
        if self.watermark == END_OF_TIME and self.timers.next(_EVENT) is not None:
            self._fire_due(self.watermark, results)
        if self.watermark == END_OF_TIME and self._table is not None and self._table.table.has_changes:
            self._fire_table(self.watermark, results)
        return results

    def _fire_table(self, watermark: float, results: list[Any]) -> None:
        """Columnar mode: every key's due windows, appended to `results` as one Arrow batch (or
        as tuples when the input was records)."""
        assert self._table is not None
        try:
            fired = self._table.fire(watermark)
        except Exception as exc:  # not one record's: fails under every policy (module docstring)
            raise self.record_error(f"<windows at watermark {watermark}>", exc) from exc
        if fired is None:
            return
        if self._columnar and self._arrow_results:
            assert isinstance(self.key, str)
            results.append(self._table.arrow(fired, self.key, self.spec.named, self._result_column))
        else:
            results.extend(self._table.tuples(fired, self.spec.named))

    def _retime(self, before: float, after: float) -> None:
        """Keep one event-time timer per key, at its store's next fire time."""
        if after == before:
            return
        if math.isfinite(before):
            self.timers.delete(_EVENT, before)
        if math.isfinite(after):
            self.timers.register(_EVENT, after)

    # -- watermarks ----------------------------------------------------------------------------
    def on_watermark(self, watermark: float) -> Batch | None:
        if watermark <= self.watermark:
            return None
        self.watermark = watermark
        results: list[Any] = []
        self._fire_due(watermark, results)
        if self._mode is WindowMode.TABLE:
            self._fire_table(watermark, results)
        return self._out(results, [])

    def _fire_due(self, watermark: float, results: list[Any]) -> None:
        """Fire every key whose timer is at or before `watermark`."""
        backend = self.backend
        for _, _key in self.timers.pop_due(_EVENT, watermark):
            store = backend.get_mutable(_STORE, self.windowing.new_store)
            self._emit(store, watermark, results)
            if self.windowing.is_empty(store):
                backend.delete(_STORE)
            elif math.isfinite(store.next_fire):
                self.timers.register(_EVENT, store.next_fire)

    def _emit(self, store: Any, watermark: float, results: list[Any]) -> None:
        key = self.backend.current_key
        try:
            fired: list[FiredWindow] = self.windowing.fire(store, watermark)
        except Exception as exc:  # not one record's: fails under every policy (module docstring)
            raise self.record_error(f"<windows of key {key!r}>", exc) from exc
        named = self.spec.named
        if self.spec.kind is WindowFunctionKind.PROCESS:
            function = self.spec.function
            for f in fired:
                try:
                    produced = function.process(key, Window(f.query, f.start, f.end), f.result)
                    if produced is not None:
                        results.extend(list(produced))
                except Exception as exc:  # a dead letter joins the results; the split finds it
                    self.reject(f"<window [{f.start}, {f.end}) of key {key!r}>", exc, results)
            return
        for f in fired:
            results.append((key, f.query, f.start, f.end, f.result) if named else (key, f.start, f.end, f.result))

    def _out(self, results: list[Any], late: list[Any]) -> Batch | None:
        self.late_records += len(late)
        if late and not self.spec.emit_late:  # nobody asked for them: counted, then dropped
            late = []
        if not results and not late:
            return None
        if results and type(results[-1]) is pa.RecordBatch:  # columnar mode's results (always last)
            if len(results) == 1 and not late:
                batch: pa.RecordBatch = results[0]
                return batch
            results = [t for r in results for t in (self._arrow_rows(r) if type(r) is pa.RecordBatch else [r])]
            return results + late
        if self._columnar and self._arrow_results and results and not late:
            try:
                return self._as_arrow(results)
            except (pa.ArrowInvalid, pa.ArrowTypeError):  # results Arrow cannot hold (e.g. tuples of
                self._arrow_results = False  # mixed types from reduce/aggregate): tuples from now on
        return results + late

    @staticmethod
    def _arrow_rows(batch: pa.RecordBatch) -> list[tuple[Any, ...]]:
        """A batch of results as the tuples the per-record path emits."""
        return list(zip(*(c.to_pylist() for c in batch.columns)))

    def _as_arrow(self, results: list[Any]) -> pa.RecordBatch:
        assert isinstance(self.key, str)
        columns = list(zip(*results))
        names = [self.key, *(["window"] if self.spec.named else []), "window_start", "window_end",
                 self._result_column]
        return pa.RecordBatch.from_arrays([pa.array(list(c)) for c in columns], names=names)


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


__all__ = ["KeyedWindowOperator", "LateRecord", "SplitLateOperator", "Window", "late_part"]
