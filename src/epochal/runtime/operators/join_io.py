"""What every join operator shares: reading a side's batch, emitting pairs, late records.

A join operator reads each input batch once into records, keys, key groups and event times
(vectorized on an Arrow batch: the key column dictionary-encoded, the time column converted in
one pass; `keys`, `base.batch_timestamps`), then runs per record against the key's state. Its
output is one record per pair: `(left, right)` without a function, `fn(left, right)` with one,
or whatever a `ProcessJoinFunction` returns for the pair (`plan.two_inputs.JoinOutput`); a left
outer join's unmatched left record pairs with None. A record the operator's watermark has
passed (too late to be joined exactly) goes to the join's late side output, if read.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa

from ...errors import RecordError
from ...plan.specs import OnError
from ...plan.two_inputs import LATE_TAGS, JoinInput, JoinOutput, JoinSpec, JoinType
from ...state.operator_state import with_operator_lists
from ..keys import batch_keys
from ..wire.batches import columns_of
from ..wire.elements import Batch
from .bad_records import DeadLetter
from .base import OperatorContext, OperatorSnapshot, batch_timestamps, extend, timed_rows
from .keyed import KeyedOperator
from .lifecycle import UserFunctions
from .side_outputs import SideOutputs
from .subtask_view import SubtaskView
from .timers import KeyedTimers, TimeDomain

_EVENT = TimeDomain.EVENT_TIME
_WATERMARK = "watermark"


class JoinContext(SubtaskView):
    """What a `ProcessJoinFunction` sees for one pair: its key, both timestamps, the window (a
    window join's), the operator's watermark, and side outputs."""

    __slots__ = ("_op", "key", "left_timestamp", "right_timestamp", "window")

    _op: JoinOperator

    def __init__(self, operator: JoinOperator) -> None:
        self._op = operator
        self.key: Any = None
        self.left_timestamp = math.nan
        self.right_timestamp: float | None = None  # None: an outer join's unmatched left record
        self.window: tuple[float, float] | None = None  # `(start, end)` in a window join

    def current_watermark(self) -> float:
        return self._op.watermark

    def output(self, tag: Any, record: Any) -> None:
        """Send `record` to the side output `tag` (an `OutputTag`)."""
        self._op.side.emit(tag, record)


class SideBatch:
    """One input batch of a join, read: per record its key, key group and event time."""

    __slots__ = ("records", "keys", "groups", "times")

    def __init__(self, records: list[Any], keys: list[Any], groups: list[int], times: list[float]) -> None:
        self.records, self.keys, self.groups, self.times = records, keys, groups, times


class JoinOperator(KeyedOperator):
    """Base of the join operators: sides, output, late records, the user's function, and one
    event-time timer per key (at the next time the key's state must be looked at)."""

    def __init__(self, spec: JoinSpec) -> None:
        super().__init__(spec)
        self.inputs: tuple[JoinInput, JoinInput] = (spec.left, spec.right)
        self.output: JoinOutput = spec.output
        self.on_error = spec.on_error
        self.side = SideOutputs(spec.side_outputs, spec.name)
        self.late_read = tuple(tag in spec.side_outputs for tag in LATE_TAGS)
        self.watermark = -math.inf
        self.how = spec.output.how
        self.semi = spec.output.how is JoinType.SEMI
        self.jctx = JoinContext(self)
        if spec.output.process:  # a ProcessJoinFunction's open, snapshot_state and close
            self.functions = UserFunctions(self.name, [spec.output.function])
        self._letters: list[DeadLetter] = []
        function = spec.output.function
        self.schema = spec.output.schema if function is None else None
        if self.schema is not None:
            self._pair: Callable[[Any, Any, list[Any]], None] = _flat_pair(
                len(self.schema) - spec.output.left_width)
        elif function is None:
            self._pair = _plain_pair
        elif spec.output.process:
            self._pair = self._process_pair
        else:
            self._pair = _function_pair(function)

    def open(self, ctx: OperatorContext) -> None:
        super().open(ctx)
        self.timers = KeyedTimers(self.backend)

    def start(self, states: list[Any]) -> None:
        """The user's function opens (`open(ctx)`, once per subtask), its operator lists restored."""
        if self.functions is not None:
            self.functions.restore(self.ctx, states)
            self.functions.open(self.jctx)

    def snapshot(self, checkpoint_id: int) -> OperatorSnapshot:
        """Keyed state, and the watermark: a record is late by it, and the state was cleaned by it
        (beside the operator lists of a rich function)."""
        taken = super().snapshot(checkpoint_id)
        return OperatorSnapshot(keyed=taken.keyed, state=with_operator_lists({_WATERMARK: self.watermark},
                                                                             taken.state))

    def restore(self, keyed: dict[int, dict[str, dict[Any, Any]]] | None, states: list[Any]) -> None:
        """Keyed state and timers; and the watermark the state was cleaned by, so a record late
        before a restore is late after it. Subtasks fed by key group saw the same watermarks up to
        an aligned barrier; after a rescale the lowest saved one holds (never later than any)."""
        super().restore(keyed, states)
        self.timers.restore()
        saved = [s[_WATERMARK] for s in states if isinstance(s, dict) and _WATERMARK in s]
        if saved:
            self.watermark = max(self.watermark, min(saved))

    def retime(self, before: float, after_: float) -> None:
        """Keep the current key's one event-time timer at `after_` (inf: none) instead of `before`."""
        if after_ == before:
            return
        if math.isfinite(before):
            self.timers.delete(_EVENT, before)
        if math.isfinite(after_):
            self.timers.register(_EVENT, after_)

    def process(self, batch: Batch) -> Batch | None:
        return self.finish(self.on_side(self.read(batch, 0), 0, []))

    def process_second(self, batch: Batch) -> Batch | None:
        return self.finish(self.on_side(self.read(batch, 1), 1, []))

    def on_side(self, batch: SideBatch, side: int, out: list[Any]) -> list[Any]:
        """Join the records of one input batch; append results to `out`."""
        raise NotImplementedError

    def on_watermark(self, watermark: float) -> Batch | None:
        if watermark <= self.watermark:
            return None
        self.watermark = watermark
        out: list[Any] = []
        for _, key in self.timers.pop_due(_EVENT, watermark):
            self.on_timer(key, watermark, out)
        return self.finish(out)

    def on_timer(self, key: Any, watermark: float, out: list[Any]) -> None:
        """The current key's timer is due at `watermark`."""
        raise NotImplementedError

    # -- reading -------------------------------------------------------------------------------
    def read(self, batch: Batch, side: int) -> SideBatch:
        """Records, keys, key groups and event times of a batch of input `side`; under a
        tolerant `on_error`, records without a time are rejected here (into `_letters`)."""
        spec = self.inputs[side]
        event_time = spec.event_time
        if event_time is None:
            records, keys, groups = batch_keys(batch, spec.key, self.ctx.max_parallelism, self.name)
            return SideBatch(records, keys, groups, [])
        try:
            times = batch_timestamps(self.name, event_time, batch, self.position())
        except RecordError:
            if self.on_error is OnError.FAIL:
                raise
            kept, kept_times, bad = timed_rows(event_time, batch)
            for record, exc in bad:
                self.reject(record, exc, self._letters)
            batch, times = kept, kept_times
        records, keys, groups = batch_keys(batch, spec.key, self.ctx.max_parallelism, self.name)
        return SideBatch(records, keys, groups, np.asarray(times, dtype=np.float64).tolist())

    # -- output --------------------------------------------------------------------------------
    def emit(self, left: Any, right: Any, out: list[Any], key: Any, lt: float, rt: float | None) -> None:
        """Append the result of one pair (right None: an unmatched left record of an outer join)."""
        jctx = self.jctx
        jctx.key, jctx.left_timestamp, jctx.right_timestamp = key, lt, rt
        if self.on_error is OnError.FAIL:
            try:
                self._pair(left, right, out)
            except Exception as exc:
                raise self.record_error((left, right), exc) from exc
            return
        done, emitted = len(out), len(self.side.out)
        try:
            self._pair(left, right, out)
        except Exception as exc:
            del out[done:], self.side.out[emitted:]
            self.reject((left, right), exc, self._letters)

    def emit_semi(self, left: Any, out: list[Any], key: Any, lt: float) -> None:
        """A semi join's result for a left record that met a right one: the record itself, or
        what the function makes of `(left, None)`."""
        if self.schema is not None:
            out.append(_fields(left))
        elif self.output.function is None:
            out.append(left)
        else:
            self.emit(left, None, out, key, lt, None)

    def _process_pair(self, left: Any, right: Any, out: list[Any]) -> None:
        extend(out, self.output.function.process_element(left, right, self.jctx))

    def late(self, side: int, record: Any) -> None:
        """A record too late to be joined: to the late side output if read, else counted."""
        self.late_records += 1
        if self.late_read[side]:
            self.side.emit(LATE_TAGS[side], record)

    def finish(self, out: list[Any]) -> Any:
        """The output of one call: results, then tagged records, then dead letters; with a
        declared schema and nothing but results, one Arrow batch of it."""
        if self.schema is not None and out and not self.side.out and not self._letters:
            return _arrow(out, self.schema)
        if self.side.out:
            out.extend(self.side.take())
        if self._letters:
            out.extend(self._letters)
            self._letters = []
        return out or None


def _plain_pair(left: Any, right: Any, out: list[Any]) -> None:
    out.append((left, right))


def _fields(record: Any) -> tuple[Any, ...]:
    """A record's fields in order: an Arrow row is a tuple already; a dict gives its values."""
    if type(record) is tuple:
        return record
    if isinstance(record, dict):
        return tuple(record.values())
    return tuple(record) if isinstance(record, (list, tuple)) else (record,)


def _flat_pair(right_width: int) -> Callable[[Any, Any, list[Any]], None]:
    """A columnar join's row: the left record's fields, then the right's (nulls for none)."""
    nulls = (None,) * right_width

    def pair(left: Any, right: Any, out: list[Any]) -> None:
        out.append(_fields(left) + (nulls if right is None else _fields(right)))
    return pair


def _arrow(rows: list[tuple[Any, ...]], schema: pa.Schema) -> pa.RecordBatch:
    columns = columns_of(rows, len(schema))
    return pa.RecordBatch.from_arrays([pa.array(c, type=f.type) for c, f in zip(columns, schema)], schema=schema)


def _function_pair(fn: Callable[[Any, Any], Any]) -> Callable[[Any, Any, list[Any]], None]:
    def pair(left: Any, right: Any, out: list[Any]) -> None:
        out.append(fn(left, right))
    return pair


def after(t: float) -> float:
    """The smallest time above `t`: a timer there fires once the watermark has passed `t`."""
    return math.nextafter(t, math.inf)


__all__ = ["JoinContext", "JoinOperator", "SideBatch", "after"]
