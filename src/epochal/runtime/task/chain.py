"""A task's chain of operators: what one operator emits flows through the rest, counted.

Every way into a chain (a batch from the input or the source, a watermark, a due timer, the
pre-barrier flush of a checkpoint, the end of input) is one hook called on an operator, followed
by the same step: count what it emitted and run it through the operators after it; what leaves
the last one goes to the output gate. `emitted` is that step, written once.

Event time inside a chain: the last operator that generates watermarks (`assign_timestamps`)
ends upstream event time there; past it, the chain runs on the watermarks it makes. A watermark
reaches every operator from where it enters, in chain order, before it goes downstream, so what
a window fires at it is ahead of it on every channel (dissertation §5.2.1).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from typing import Any

from ..operators import OperatorContext, RuntimeOperator
from ..watermarks import END_OF_TIME, NO_WATERMARK, WatermarkAdvance
from ..wire.batches import batch_len
from ..wire.elements import Batch, Watermark
from ..wire.messages import OperatorMetrics
from .output_gate import OutputGate

log = logging.getLogger(__name__)


class OperatorChain:
    """The operators of one subtask in chain order, with their counters and their event time.

    Args:
        operators: the running operators, first to last.
        output: where the last operator's output goes, and where watermarks are broadcast.
        name: the task's name, for logs.
    """

    def __init__(self, operators: list[RuntimeOperator], output: OutputGate, name: str) -> None:
        self.operators = operators
        self.output = output
        self.name = name
        n = len(operators)
        self.records_in = [0] * n
        self.records_out = [0] * n
        self.watermarks_seen = [NO_WATERMARK] * n  # per operator, for metrics
        # the last operator of the chain that generates watermarks (`assign_timestamps`), if any
        self.assigner = max((i for i, op in enumerate(operators) if op.generates_watermarks), default=None)
        # the operators that may set timers: a host asks for the next one before every step
        self._timed = [op for op in operators if type(op).next_timer is not RuntimeOperator.next_timer]

    def __iter__(self) -> Iterator[RuntimeOperator]:
        return iter(self.operators)

    def __len__(self) -> int:
        return len(self.operators)

    @property
    def first(self) -> RuntimeOperator:
        return self.operators[0]

    def find(self, uid: str) -> RuntimeOperator | None:
        return next((op for op in self.operators if op.uid == uid), None)

    # -- lifecycle -------------------------------------------------------------------------------
    def open(self, ctx: OperatorContext, restored: Callable[[RuntimeOperator], tuple[dict[int, Any] | None, list[Any]]]
             ) -> None:
        """Open every operator and restore it from what `restored` reads for it (keyed state by
        key group, operator states; `(None, [])` on a fresh start, when sinks clean up after a
        failed run)."""
        for op in self.operators:
            op.open(ctx)
            op.restore(*restored(op))

    def close(self) -> None:
        for op in self.operators:
            try:
                op.close()
            except Exception:  # closing after a failure must not mask the failure
                log.debug("%s: closing %s failed", self.name, op.name, exc_info=True)

    # -- data ------------------------------------------------------------------------------------
    def process(self, batch: Batch | None, start: int = 0) -> None:
        """Run `batch` through the operators from `start` on; the rest goes to the output."""
        operators = self.operators
        for i in range(start, len(operators)):
            if batch is None:
                return
            n = batch_len(batch)
            if n == 0:
                return
            self.records_in[i] += n
            batch = operators[i].process(batch)
            if batch is not None:
                self.records_out[i] += batch_len(batch)
        if batch is not None and batch_len(batch):
            self.output.emit(batch)
        assigner = self.assigner
        if assigner is not None and start <= assigner:
            advance = operators[assigner].take_watermark()
            if advance is not None:
                self.advance_watermark(advance, assigner + 1)

    def process_second(self, batch: Batch) -> None:
        """A batch of the first operator's second input (a two-input operator heads its chain)."""
        n = batch_len(batch)
        if n == 0:
            return
        self.records_in[0] += n
        self.emitted(0, self.operators[0].process_second(batch))

    def emitted(self, i: int, out: Batch | None) -> None:
        """Operator `i` emitted `out` outside `process` (a timer, a watermark, a flush): count
        it and run it through the rest of the chain."""
        if out is not None and (n := batch_len(out)):
            self.records_out[i] += n
            self.process(out, i + 1)

    def advance_watermark(self, advance: WatermarkAdvance, start: int) -> None:
        """Event time moved: operators from `start` on fire what is due, then it goes downstream."""
        if self.assigner is not None and start <= self.assigner and advance.timestamp != END_OF_TIME:
            return  # upstream event time ends at the assigner, which makes its own
        if start:  # the source or the assigner that generated it
            self.watermarks_seen[start - 1] = advance.timestamp
        for i in range(start, len(self.operators)):
            self.watermarks_seen[i] = advance.timestamp
            self.emitted(i, self.operators[i].on_watermark(advance.timestamp))
        self.output.broadcast(Watermark(advance.timestamp, advance.idle))

    def next_timer(self) -> float | None:
        timed = self._timed
        if not timed:
            return None
        times = [t for op in timed if (t := op.next_timer()) is not None]
        return min(times) if times else None

    def fire_timers(self, now: float) -> None:
        for i, op in enumerate(self.operators):
            timer = op.next_timer()
            if timer is not None and timer <= now:
                self.emitted(i, op.on_processing_time(now))
                if i == self.assigner and (advance := op.take_watermark()) is not None:
                    self.advance_watermark(advance, i + 1)  # its input went idle

    def pre_barrier(self, checkpoint_id: int) -> None:
        """In chain order, so what one operator emits ahead of the barrier reaches the next first."""
        for i, op in enumerate(self.operators):
            self.emitted(i, op.pre_barrier(checkpoint_id))

    def end_input(self) -> None:
        """Flush each operator in chain order, so what one emits at the end reaches the next."""
        for i, op in enumerate(self.operators):
            self.emitted(i, op.end_input())

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        for op in self.operators:
            op.notify_checkpoint_complete(checkpoint_id)

    def metrics(self) -> tuple[OperatorMetrics, ...]:
        return tuple(
            OperatorMetrics(op.name, self.records_in[i], self.records_out[i], op.late_records, op.skipped_records)
            for i, op in enumerate(self.operators)
        )
