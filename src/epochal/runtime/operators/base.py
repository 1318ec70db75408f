"""The running operators' common ground: the base class, its context, and its snapshot.

An operator turns one input batch into at most one output batch (`process`), so a chain of
operators in one task is a loop of function calls. Every user function is called inside a guard
that turns its exception into an `OperatorError` naming the operator and the record; an
operator that runs user code applies its `on_error` policy to a record its code fails on
(`RuntimeOperator.reject`, and `bad_records`).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from ...config import StateConfig
from ...errors import OperatorError, RecordError
from ...plan.specs import OnError, OperatorSpec
from ...plan.time import EventTime, TimestampError
from ...state.contract import KeyedSnapshot
from ...state.keygroups import KeyGroups
from ...state.manifest import SubtaskState
from ...state.sections import GroupCopies
from ..clock import Clock
from ..wire.batches import batch_len, to_records
from ..wire.elements import Batch
from .bad_records import DeadLetter, SourceOrigin
from .lifecycle import RuntimeContext, UserFunctions

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class OperatorContext:
    """Where a running operator sits: its subtask, its key groups, and the clock."""

    subtask: int
    parallelism: int
    max_parallelism: int
    key_groups: KeyGroups
    clock: Clock
    state: StateConfig = StateConfig()
    name: str = ""  # the task's name, for the disk backend's working directory
    origin: SourceOrigin = field(default_factory=SourceOrigin)  # the source batch being processed
    active: int | None = None  # subtasks of the vertex that read splits (`JobVertex.active`)


@dataclass(frozen=True, slots=True)
class OperatorSnapshot:
    """The fixed state of one operator of one subtask; serialised off the processing path."""

    keyed: KeyedSnapshot | None = None
    state: Any = None


class RuntimeOperator:
    """Base of the running operators; the defaults are those of a stateless operator."""

    generates_watermarks = False  # watermarks from upstream stop here; see `take_watermark`
    is_async = False  # results come later, polled by the chain (`async_io.AsyncWaitOperator`)
    late_records = 0  # records too late for their windows (window operators count them)
    skipped_records = 0  # records user code failed on, dropped under on_error=SKIP
    on_error = OnError.FAIL  # operators that run user code take theirs from the spec
    _rejected = False  # a record was skipped or dead-lettered here (logged once)
    functions: UserFunctions | None = None  # the user's rich functions and operator state (`lifecycle`)

    def __init__(self, spec: OperatorSpec) -> None:
        self.name = spec.name
        self.uid = spec.uid

    def open(self, ctx: OperatorContext) -> None:
        self.ctx = ctx

    def start(self, states: list[Any]) -> None:
        """Once after `open` and `restore`: the user's functions get their operator state (the
        part of every old subtask's `states` this subtask takes) and open."""
        functions = self.functions
        if functions is not None:
            functions.restore(self.ctx, states)
            functions.open(RuntimeContext(self.name, self.ctx, functions.store))

    def operator_state(self, checkpoint_id: int) -> Any:
        """The user functions' operator state for a snapshot (`OperatorSnapshot.state`)."""
        return self.functions.snapshot(checkpoint_id) if self.functions is not None else None

    def process(self, batch: Batch) -> Batch | None:
        return batch

    def process_second(self, batch: Batch) -> Batch | None:
        """A batch of the second input: two-input operators only (`plan.two_inputs`)."""
        raise RuntimeError(f"operator {self.name!r} has one input")

    def end_input(self) -> Batch | None:
        return None

    def next_timer(self) -> float | None:
        return None

    def on_processing_time(self, now: float) -> Batch | None:
        return None

    def on_watermark(self, watermark: float) -> Batch | None:
        """Event time reached `watermark`: fire what is due (windows, event-time timers)."""
        return None

    def take_watermark(self) -> Any:
        """For an operator that generates watermarks: its `WatermarkAdvance`, if it moved."""
        return None

    def pre_barrier(self, checkpoint_id: int) -> Batch | None:
        """What the operator emits once every record before checkpoint `checkpoint_id`'s barrier
        is in, ahead of the barrier (Flink's `prepareSnapshotPreBarrier`): it belongs to the
        epoch the checkpoint closes, so its sinks commit it with that checkpoint."""
        return None

    def snapshot(self, checkpoint_id: int) -> OperatorSnapshot:
        return OperatorSnapshot(state=self.operator_state(checkpoint_id))

    def on_snapshot_written(self, checkpoint_id: int, written: SubtaskState | None) -> None:
        """The asynchronous part wrote this operator's snapshot (None: nothing was written, or
        writing failed); called on the task's thread, before the checkpoint is acknowledged."""

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        pass

    def restore(self, keyed: dict[int, dict[str, dict[Any, Any]]] | None, states: list[Any]) -> None:
        """Load state; `states` holds the operator state of *every* old subtask (union list)."""

    def reassign(self, owned: KeyGroups, gained: dict[int, dict[str, dict[Any, Any]]],
                 copies: GroupCopies | None = None) -> None:
        """Key groups moved (`runtime.master.migrations`): keyed operators own `owned` from now on, with
        `gained`'s state; others have nothing to do."""

    def close(self) -> None:
        if self.functions is not None:
            self.functions.close()

    # -- bad records -------------------------------------------------------------------------
    def position(self) -> dict[str, Any] | None:
        """The source position of the batch being processed, where known (`SourceOrigin`)."""
        ctx: OperatorContext | None = getattr(self, "ctx", None)
        return ctx.origin.position() if ctx is not None else None

    def record_error(self, record: Any, cause: BaseException) -> RecordError:
        """The error that fails the attempt: user code failed on `record`."""
        return RecordError(self.name, record, cause, self.position())

    def reject(self, record: Any, cause: BaseException, letters: list[Any]) -> None:
        """Apply the operator's policy to a record its code failed on: raise (fail), count
        (skip), or add its dead letter to `letters` (dead_letter). Call it in an `except`."""
        policy = self.on_error
        if policy is OnError.FAIL:
            raise self.record_error(record, cause) from cause
        first = not self._rejected
        if policy is OnError.SKIP:
            self.skipped_records += 1
        else:
            letters.append(DeadLetter.of(self.name, record, cause, self.position()))
        if first:  # once per subtask: the metrics and the dead-letter sink count the rest
            self._rejected = True
            log.warning("operator %r: %s a record its code failed on (%s: %s); on_error=%r",
                        self.name, "skipped" if policy is OnError.SKIP else "dead-lettered",
                        type(cause).__name__, cause, policy.value)


@contextlib.contextmanager
def guard(operator: str, what: str) -> Iterator[None]:
    """Turn a connector's exception into an OperatorError naming the operator and the step."""
    try:
        yield
    except OperatorError:
        raise
    except Exception as exc:
        raise OperatorError(operator, what, exc) from exc


def batch_repr(batch: Batch) -> str:
    head = batch.slice(0, 3).to_pylist() if isinstance(batch, pa.RecordBatch) else batch[:3]
    return f"<batch of {batch_len(batch)} records: {head!r}...>"


def extend(out: list[Any], produced: Iterable[Any] | None) -> None:
    if produced is not None:
        out.extend(produced)


def batch_timestamps(
    operator: str, event_time: EventTime, batch: Batch, position: dict[str, Any] | None = None
) -> np.ndarray:
    """The event times of a batch as float seconds, vectorized for an Arrow column.

    Raises:
        RecordError: naming `operator` and the first record whose timestamp is missing or not
            a time (and the batch's source `position`, if given).
    """
    try:
        if isinstance(batch, pa.RecordBatch) and event_time.fn is None:
            return event_time.of_arrow(batch)
        return event_time.of_records(to_records(batch))
    except TimestampError as exc:
        raise RecordError(operator, _first_without_time(event_time, batch), exc, position) from exc


def timed_rows(event_time: EventTime, batch: Batch) -> tuple[Batch, np.ndarray, list[tuple[Any, Exception]]]:
    """The rows of `batch` that have an event time, their times, and the rows that have none
    with the reason. One row at a time: for a batch `batch_timestamps` refused."""
    bad: list[tuple[Any, Exception]] = []
    if isinstance(batch, pa.RecordBatch) and event_time.fn is None:
        good: list[int] = []
        for i in range(batch.num_rows):
            row = batch.slice(i, 1)
            try:
                event_time.of_arrow(row)
                good.append(i)
            except TimestampError as exc:
                bad.append((row.to_pylist()[0], exc))
        kept = batch.take(pa.array(good, pa.int64()))
        return kept, (event_time.of_arrow(kept) if good else np.empty(0)), bad
    records: list[Any] = []
    times: list[float] = []
    for record in to_records(batch):
        try:
            times.append(event_time.of_record(record))
            records.append(record)
        except TimestampError as exc:
            bad.append((record, exc))
    return records, np.array(times, dtype=np.float64), bad


def _first_without_time(event_time: EventTime, batch: Batch) -> Any:
    for record in to_records(batch):
        try:
            event_time.of_record(record)
        except TimestampError:
            return record
    return f"<batch of {batch_len(batch)} records>"
