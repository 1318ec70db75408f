"""The keyed window operator: Cutty's shared slices (dissertation ch. 5) in keyed state.

A subtask keeps its windows in one of two modes, chosen by its first input. Per key
(`window_stores.StoreWindows`): one `SliceStore` and one event-time timer per key, records added
one at a time or as whole Arrow batches. Columnar (`window_table.TableWindows`): periodic
queries with a count, sum, min or max whose first input is an Arrow batch keep every key's
slices in one `SliceTable` (one row per key, one column per slice), written into keyed state per
key group before each snapshot; a watermark fires every due window of every key in one
vectorized pass, with no timer per key. Either way the windows are keyed state, checkpointed,
restored, rescaled and moved with their key groups (§4.2). A late record within the allowed
lateness makes its windows fire again at the next watermark (or, after the input ended, at the
end of its batch), so the output does not depend on how records are batched. What goes out, and
how, is `window_output`.

Bad records (`on_error`): a record whose event time or value cannot be read, or that the
window's reduce or aggregate function fails on while it is added, is skipped or dead-lettered
one by one; so is a window a process window function fails on. On the Arrow path only the event
times are checked row by row: an error while a batch's columns are added, or while windows fire
(an aggregate's merge or get_result), fails the attempt under every policy, since the key's
windows may be half updated and cannot be taken back.
"""

from __future__ import annotations

import operator
from enum import Enum
from functools import partial
from typing import Any

import pyarrow as pa

from ...errors import RecordError
from ...plan.specs import KeyedWindowSpec, OnError, WindowFunctionKind
from ...plan.time import EventTime
from ...plan.windows import Window
from ...state.keygroups import KeyGroups
from ...state.sections import GroupCopies
from ..keys import batch_keys
from ..watermarks import END_OF_TIME, NO_WATERMARK
from ..windowing import Aggregate, Count, Max, Min, Process, Reduce, Sum, Windowing
from ..wire.batches import to_records
from ..wire.elements import Batch
from .aggregates.local_windows import weights_of
from .bad_records import DeadLetter, with_letters
from .base import OperatorContext, OperatorSnapshot, batch_timestamps, timed_rows
from .keyed import KeyedOperator
from .lifecycle import UserFunctions, rich_functions
from .side_outputs import SideOutputs, context_args
from .window_output import LateRecord, WindowOutput
from .window_stores import STORE, StoreWindows
from .window_table import TableWindows, table_reduction

_COUNT = WindowFunctionKind.COUNT


class WindowMode(Enum):
    """Where an operator subtask keeps its windows."""

    UNDECIDED = "undecided"  # no input yet: the first batch decides
    STORES = "stores"  # one SliceStore and one event-time timer per key (window_stores)
    TABLE = "table"  # one SliceTable for the subtask (window_table)


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
    """Window queries per key on shared slices, fired by the watermark."""

    def __init__(self, spec: KeyedWindowSpec) -> None:
        super().__init__(spec)
        self.spec = spec
        self.key = spec.key
        # outside event time records get their times elsewhere (`window_triggers`): a field never read
        self.event_time = spec.event_time if spec.event_time is not None else EventTime(field=0)
        self.windowing = Windowing(dict(spec.queries), _aggregate(spec), spec.allowed_lateness)
        value = spec.value
        self.value_of = operator.itemgetter(value) if isinstance(value, (str, int)) else value
        self.watermark = NO_WATERMARK
        self.late_records = 0  # records too late for some window (a metric), kept or dropped
        self.on_error = spec.on_error
        self.output = WindowOutput(spec)
        self._reduction = table_reduction(spec)
        self._mode = WindowMode.UNDECIDED if self._reduction is not None else WindowMode.STORES
        if spec.combined:  # partials from a local phase: only the slice table merges them
            assert self._reduction is not None, "a combined window operator needs the columnar table"
            self._mode = WindowMode.TABLE
        self._table: TableWindows | None = None
        if rich := rich_functions(spec.function):
            self.functions = UserFunctions(self.name, rich)
        self.side = SideOutputs(spec.side_outputs, spec.name)  # a process function's `ctx.output`
        self._process_args = context_args(spec.function, self) if spec.kind is WindowFunctionKind.PROCESS else ()

    def open(self, ctx: OperatorContext) -> None:
        super().open(ctx)
        self.stores = StoreWindows(self.windowing, self.backend, self.event_time, self.value_of)
        if self._reduction is not None:
            self._table = TableWindows(self.windowing, self._reduction, self.backend)

    def restore(self, keyed: dict[int, dict[str, dict[Any, Any]]] | None, states: list[Any]) -> None:
        super().restore(keyed, states)
        self.stores.restore()
        if self._table is not None and self._table.reload():
            self._mode = WindowMode.TABLE
            self.output.columnar = True
        elif self._mode is WindowMode.UNDECIDED and self.stores.has_stores():
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
                found[STORE] = store
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
            self.output.columnar = True
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
        records, keys, groups = batch_keys(batch, self.key, self.ctx.max_parallelism, self.name)
        if self.on_error is not OnError.FAIL:
            letters: list[DeadLetter] = []
            reject = partial(self.reject, letters=letters)
            late = self.stores.add_records_tolerant(records, keys, groups, self.watermark, reject)
            return with_letters(self._out(self._late_updates(), late), letters)
        late = self.stores.add_records(records, keys, groups, self.watermark, self.record_error)
        return self._out(self._late_updates(), late)

    def _process_arrow(self, batch: pa.RecordBatch) -> Batch | None:
        assert isinstance(self.key, str)
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
        admission = self.stores.add_columns(batch.column(self.key), times, values, self.watermark,
                                            self.ctx.max_parallelism, self.record_error)
        results = self._late_updates()
        late: list[Any] = []
        if len(admission.late_rows):
            late = self.output.late_rows(batch, admission.late_rows, admission.late_queries)
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
                late = self.output.late_rows(batch, admission.late_rows, admission.late_queries)
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
        if self.watermark == END_OF_TIME and self.stores.has_timers():
            self._fire_due(self.watermark, results)
        if self.watermark == END_OF_TIME and self._table is not None and self._table.table.has_changes:
            self._fire_table(self.watermark, results)
        return results

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
        """Fire every key whose timer is at or before `watermark` (per-key mode)."""
        process = self.spec.kind is WindowFunctionKind.PROCESS
        for key, fired in self.stores.fire_due(watermark, self.record_error):
            if not process:
                self.output.add_windows(results, key, fired)
                continue
            function = self.spec.function
            for f in fired:
                try:
                    produced = function.process(key, Window(f.query, f.start, f.end), f.result, *self._process_args)
                    if produced is not None:
                        results.extend(list(produced))
                except Exception as exc:  # a dead letter joins the results; the split finds it
                    self.side.out.clear()
                    self.reject(f"<window [{f.start}, {f.end}) of key {key!r}>", exc, results)
                results.extend(self.side.take())

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
        if self.output.wants_arrow:
            assert isinstance(self.key, str)
            results.append(self._table.arrow(fired, self.key, self.spec.named, self.output.result_column))
        else:
            results.extend(self._table.tuples(fired, self.spec.named))

    def _out(self, results: list[Any], late: list[Any]) -> Batch | None:
        self.late_records += len(late)
        return self.output.batch(results, late)


__all__ = ["KeyedWindowOperator", "WindowMode"]
