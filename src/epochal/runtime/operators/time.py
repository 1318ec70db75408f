"""Event time mid-stream: the operator behind `DataStream.assign_timestamps`."""

from __future__ import annotations

from typing import Any

from ...errors import RecordError
from ...plan.specs import AssignTimestampsSpec, OnError
from ..watermarks import NO_WATERMARK, SplitWatermarks, WatermarkAdvance
from ..wire.batches import batch_len
from ..wire.elements import Batch
from .bad_records import DeadLetter, with_letters
from .base import OperatorSnapshot, RuntimeOperator, batch_timestamps, timed_rows

_ALL = "all"  # one generator per subtask: its input is one stream, not a set of splits


class AssignTimestampsOperator(RuntimeOperator):
    """Generates this subtask's watermark from the timestamps of the records it passes on.

    Records pass unchanged. Watermarks from upstream end here (the task asks `generates_watermarks`),
    as with Flink's `assignTimestampsAndWatermarks`. Its state is the largest timestamp seen; on a
    restore with another parallelism every subtask takes the smallest of the old subtasks', so
    no watermark runs ahead of a record still to come. A record without a timestamp fails the
    attempt, or under `skip` / `dead_letter` is taken out of the stream here.
    """

    generates_watermarks = True

    def __init__(self, spec: AssignTimestampsSpec) -> None:
        super().__init__(spec)
        self.spec = spec.watermarks
        self.generator = SplitWatermarks(spec.watermarks.max_delay, spec.watermarks.idleness)
        self.on_error = spec.on_error
        self._ended = False

    def process(self, batch: Batch) -> Batch | None:
        letters: list[DeadLetter] = []
        try:
            times = batch_timestamps(self.name, self.spec.event_time, batch, self.position())
        except RecordError:
            if self.on_error is OnError.FAIL:
                raise
            batch, times, bad = timed_rows(self.spec.event_time, batch)
            for record, exc in bad:
                self.reject(record, exc, letters)
        n = batch_len(batch)
        self.generator.on_records(_ALL, float(times.max()) if n else None, self.ctx.clock.now())
        return with_letters(batch if n else None, letters)

    def take_watermark(self) -> WatermarkAdvance | None:
        return self.generator.advance([_ALL], self.ctx.clock.now())

    def next_timer(self) -> float | None:
        """With idleness: when this subtask's input has been quiet long enough to go idle. A
        subtask that receives nothing more (its source subtask read all its files) must still
        say so, or it holds every window downstream back."""
        return None if self._ended else self.generator.idle_at()

    def end_input(self) -> Batch | None:
        self._ended = True
        return None

    def snapshot(self, checkpoint_id: int) -> OperatorSnapshot:
        return OperatorSnapshot(state=self.generator.max_timestamp.get(_ALL))

    def restore(self, keyed: Any, states: list[Any]) -> None:
        seen = [s for s in states if s is not None]
        if seen:
            self.generator.restore({_ALL: min(seen)})

    @property
    def watermark(self) -> float:
        newest = self.generator.max_timestamp.get(_ALL)
        return NO_WATERMARK if newest is None else newest - self.spec.max_delay
