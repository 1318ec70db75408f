"""A task's chain of operators: what one operator emits flows through the rest, counted.

Every way into a chain (a batch from the input or the source, a watermark, a due timer, the
pre-barrier flush of a checkpoint, the end of input) is one hook called on an operator, followed
by the same step: count what it emitted and run it through the operators after it; what leaves
the last one goes to the output gate. `emitted` is that step, written once.

Event time inside a chain: the last operator that generates watermarks (`assign_timestamps`)
ends upstream event time there; past it, the chain runs on the watermarks it makes. A watermark
reaches every operator from where it enters, in chain order, before it goes downstream, so what
a window fires at it is ahead of it on every channel (dissertation §5.2.1).

Async operators (`map_async`) emit outside every hook: their results arrive on the event loop,
and the task polls them (`poll_async`) when `has_ready`. A watermark waits behind the records
in flight before it (`hold_watermark`) and goes on from there when they have left; while one
is full (`is_saturated`) the task reads no input; and the end of input waits at the first
operator with requests in flight (`end_input` returns False, and resumes there when called again).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from typing import Any

from ..operators import AsyncWaitOperator, OperatorContext, RuntimeOperator
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
        self.async_ops: list[tuple[int, AsyncWaitOperator]] = [
            (i, op) for i, op in enumerate(operators) if isinstance(op, AsyncWaitOperator)
        ]
        self._end_from: int | None = None  # the end of input waits at this operator (in flight)
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
        failed run); then the user's functions open, in chain order, their state restored."""
        for op in self.operators:
            op.open(ctx)
            keyed, states = restored(op)
            op.restore(keyed, states)
            op.start(states)

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
        timestamp = advance.timestamp
        for i in range(start, len(self.operators)):
            op = self.operators[i]
            if timestamp != advance.timestamp:  # an operator before it held event time back
                advance = WatermarkAdvance(timestamp, advance.idle)
            if op.is_async and op.hold_watermark(advance):  # type: ignore[attr-defined]
                return  # it goes on from there once the records before it left (`poll_async`)
            self.watermarks_seen[i] = timestamp
            self.emitted(i, op.on_watermark(timestamp))
            timestamp = op.output_watermark(timestamp)  # held back by what it may still emit
        self.output.broadcast(Watermark(timestamp, advance.idle))

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

    def end_input(self) -> bool:
        """Flush each operator in chain order, so what one emits at the end reaches the next;
        False if an async operator still has requests in flight: call again once they left."""
        start = self._end_from or 0
        for i in range(start, len(self.operators)):
            op = self.operators[i]
            if self._end_from != i:  # (not again for the operator it waited at)
                self.emitted(i, op.end_input())
            if op.is_async and op.has_pending():  # type: ignore[attr-defined]
                self._end_from = i
                return False
        self._end_from = None
        return True

    @property
    def ending(self) -> bool:
        """Whether the end of input waits for an async operator's requests in flight."""
        return self._end_from is not None

    # -- async operators -------------------------------------------------------------------------
    def has_ready(self) -> bool:
        """Whether an async operator has results (or watermarks) to let go."""
        for _, op in self.async_ops:
            if op.has_ready():
                return True
        return False

    def is_saturated(self) -> bool:
        """Whether an async operator is full: the task reads no input until it is not."""
        for _, op in self.async_ops:
            if op.is_saturated():
                return True
        return False

    def poll_async(self) -> None:
        """Run what async operators let go through the rest of the chain, in their order."""
        for i, op in self.async_ops:
            if not op.has_ready():
                continue
            for item in op.take_ready():
                if isinstance(item, WatermarkAdvance):
                    self.advance_watermark(item, i + 1)
                else:
                    self.emitted(i, item)

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        for op in self.operators:
            op.notify_checkpoint_complete(checkpoint_id)

    def metrics(self) -> tuple[OperatorMetrics, ...]:
        return tuple(
            OperatorMetrics(op.name, self.records_in[i], self.records_out[i], op.late_records, op.skipped_records)
            for i, op in enumerate(self.operators)
        )
