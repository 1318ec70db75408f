"""Connected streams: one operator, two inputs (`plan.two_inputs`).

`KeyedCoProcessOperator` is the keyed process operator with a second input: both inputs' records
run against the same keyed state and timers, each keyed by its own selector, so the state of a
key holds both sides and lives in the key's group like any keyed state (checkpointed, restored,
rescaled and moved live with it). `CoProcessOperator` runs a `CoProcessFunction` on streams that
are not keyed: no keyed state, no timers (as in Flink); co-map and co-flat-map are such functions.

The task says which input a batch came from: `process` is input 0, `process_second` input 1.
"""

from __future__ import annotations

from typing import Any

from ...plan.specs import OnError
from ...plan.two_inputs import BroadcastProcessSpec, CoProcessSpec, KeyedCoProcessSpec
from ..watermarks import NO_WATERMARK
from ..wire.batches import to_records
from ..wire.elements import Batch
from .bad_records import DeadLetter, with_letters
from .base import OperatorContext, RuntimeOperator, extend
from .lifecycle import UserFunctions
from .process import KeyedProcessOperator
from .side_outputs import SideOutputs, with_side
from .subtask_view import SubtaskView


class KeyedCoProcessOperator(KeyedProcessOperator):
    """A `KeyedCoProcessFunction`: `process_element1` / `process_element2` per record of the
    first / second input, with the current key set; `on_timer` as in a keyed process function."""

    def __init__(self, spec: KeyedCoProcessSpec) -> None:
        super().__init__(spec)
        self.key2 = spec.keys[1]

    def process(self, batch: Batch) -> Batch | None:
        return self.run(batch, self.key, self.function.process_element1)

    def process_second(self, batch: Batch) -> Batch | None:
        return self.run(batch, self.key2, self.function.process_element2)


class CoContext(SubtaskView):
    """What a `CoProcessFunction` sees: its subtask, time, and side outputs."""

    _op: CoProcessOperator

    def __init__(self, operator: CoProcessOperator) -> None:
        self._op = operator

    def current_watermark(self) -> float:
        """The operator's event time: the minimum of both inputs' watermarks."""
        return self._op.watermark

    def current_processing_time(self) -> float:
        return self._op.ctx.clock.now()

    def output(self, tag: Any, record: Any) -> None:
        """Send `record` to the side output `tag` (an `OutputTag`)."""
        self._op.side.emit(tag, record)


class CoProcessOperator(RuntimeOperator):
    """A `CoProcessFunction` on two streams that are not keyed."""

    def __init__(self, spec: CoProcessSpec | BroadcastProcessSpec) -> None:
        super().__init__(spec)
        self.function = spec.function
        self.on_error = spec.on_error
        self.side = SideOutputs(spec.side_outputs, spec.name)
        self.watermark = NO_WATERMARK
        self.functions = UserFunctions(self.name, [self.function])

    def open(self, ctx: OperatorContext) -> None:
        super().open(ctx)
        self.cctx = CoContext(self)

    def start(self, states: list[Any]) -> None:
        """The function opens (`open(ctx)`, once per subtask) with its operator lists restored."""
        functions = self.functions
        assert functions is not None
        functions.restore(self.ctx, states)
        functions.open(self.cctx)

    def on_watermark(self, watermark: float) -> Batch | None:
        self.watermark = max(self.watermark, watermark)
        return None

    def process(self, batch: Batch) -> Batch | None:
        return self._run(batch, self.function.process_element1)

    def process_second(self, batch: Batch) -> Batch | None:
        return self._run(batch, self.function.process_element2)

    def _run(self, batch: Batch, fn: Any) -> Batch | None:
        records = to_records(batch)
        cctx, side = self.cctx, self.side
        out: list[Any] = []
        letters: list[DeadLetter] = []
        if self.on_error is OnError.FAIL:
            record = None
            try:
                for record in records:
                    extend(out, fn(record, cctx))
            except Exception as exc:
                raise self.record_error(record, exc) from exc
        else:
            for record in records:
                emitted = len(side.out)
                try:
                    produced = fn(record, cctx)
                    extend(out, list(produced) if produced is not None else None)
                except Exception as exc:
                    del side.out[emitted:]
                    self.reject(record, exc, letters)
        return with_letters(with_side(out or None, side.take()), letters)


__all__ = ["CoContext", "CoProcessOperator", "KeyedCoProcessOperator"]
