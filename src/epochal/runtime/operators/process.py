"""The keyed process operator: a user's `KeyedProcessFunction` with keyed state and timers.

Under `on_error="skip"` or `"dead_letter"` a record (or a timer) the function fails on is
skipped or dead-lettered; what the function emitted for it is dropped, but state it changed
before it raised stays changed (as in Flink: state is not transactional per record).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from ...errors import OperatorError
from ...plan.specs import KeyedProcessSpec, OnError
from ...plan.time import time_of
from ...plan.two_inputs import BroadcastProcessSpec, KeyedCoProcessSpec
from ...state.handles import ListState, MapState, ValueState
from ..keys import batch_keys
from ..watermarks import END_OF_TIME, NO_WATERMARK
from ..wire.elements import Batch
from .bad_records import DeadLetter, with_letters
from .base import OperatorContext, extend
from .keyed import KeyedOperator
from .side_outputs import SideOutputs, with_side
from .timers import KeyedTimers, TimeDomain

H = TypeVar("H")  # a state handle


class Timers:
    """The current key's timers, as a process function registers them (`ctx.timers`)."""

    def __init__(self, timers: KeyedTimers) -> None:
        self._timers = timers

    def register_event_time(self, timestamp: float) -> None:
        """Call `on_timer(timestamp, ctx)` for the current key once the watermark reaches it."""
        self._timers.register(TimeDomain.EVENT_TIME, time_of(timestamp))

    def delete_event_time(self, timestamp: float) -> None:
        self._timers.delete(TimeDomain.EVENT_TIME, time_of(timestamp))

    def register_processing_time(self, timestamp: float) -> None:
        """Call `on_timer(timestamp, ctx)` for the current key once processing time reaches it."""
        self._timers.register(TimeDomain.PROCESSING_TIME, float(timestamp))

    def delete_processing_time(self, timestamp: float) -> None:
        self._timers.delete(TimeDomain.PROCESSING_TIME, float(timestamp))


class ProcessContext:
    """What a keyed process function sees: the current key, its state, time and timers.

    Passed to `open()` (register state there) and to every `process_element` / `on_timer` call;
    it implements `epochal.ProcessContext` (the API layer's protocol).
    """

    def __init__(self, operator: KeyedProcessOperator) -> None:
        self._op = operator
        self._backend = operator.backend
        self._states: dict[str, Any] = {}
        self._timers = Timers(operator.timers)
        self._time_domain: TimeDomain | None = None  # of the timer firing, in `on_timer`
        self._side = operator.side

    def output(self, tag: Any, record: Any) -> None:
        """Send `record` to the side output `tag` (an `OutputTag`), read with `side_output(tag)`."""
        self._side.emit(tag, record)

    @property
    def timers(self) -> Timers:
        """The current key's timers, in both time domains."""
        return self._timers

    @property
    def time_domain(self) -> TimeDomain | None:
        """In `on_timer`: which clock the firing timer follows; None elsewhere."""
        return self._time_domain

    @property
    def key(self) -> Any:
        """The key of the record (or timer) being processed."""
        return self._backend.current_key

    @property
    def subtask(self) -> int:
        return self._op.ctx.subtask

    def _register(self, name: str, handle: H) -> H:
        if name.startswith("__"):
            raise ValueError(f"state names starting with '__' are reserved: {name!r}")
        existing = self._states.get(name)
        if existing is not None and type(existing) is not type(handle):
            raise ValueError(f"state {name!r} is already registered as {type(existing).__name__}")
        self._states[name] = handle
        return handle

    def value_state(self, name: str, default: Any = None) -> ValueState[Any]:
        """Register (or fetch) the keyed value state `name`."""
        return self._register(name, ValueState(self._backend, name, default))

    def list_state(self, name: str) -> ListState[Any]:
        """Register (or fetch) the keyed list state `name`."""
        return self._register(name, ListState(self._backend, name))

    def map_state(self, name: str) -> MapState[Any, Any]:
        """Register (or fetch) the keyed map state `name`."""
        return self._register(name, MapState(self._backend, name))

    def current_processing_time(self) -> float:
        return self._op.ctx.clock.now()

    def current_watermark(self) -> float:
        """The operator's event time: -inf before the first watermark, inf after the input ended."""
        return self._op.watermark

    def register_processing_time_timer(self, timestamp: float) -> None:
        """Call `on_timer(timestamp, ctx)` for the current key once processing time reaches it."""
        self.timers.register_processing_time(timestamp)

    def delete_processing_time_timer(self, timestamp: float) -> None:
        self.timers.delete_processing_time(timestamp)


class KeyedProcessOperator(KeyedOperator):
    """A user's keyed process function, with keyed state and timers in both time domains."""

    context_type: type[ProcessContext] = ProcessContext  # what the function's hooks get

    def __init__(self, spec: KeyedProcessSpec | KeyedCoProcessSpec | BroadcastProcessSpec) -> None:
        super().__init__(spec)
        self.function = spec.function
        self.key = spec.keys[0] if isinstance(spec, KeyedCoProcessSpec) else spec.key
        self.on_error = spec.on_error
        self.watermark = NO_WATERMARK
        self.side = SideOutputs(spec.side_outputs, spec.name)

    def open(self, ctx: OperatorContext) -> None:
        super().open(ctx)
        self.timers = KeyedTimers(self.backend)
        self.pctx = self.context_type(self)
        opener = getattr(self.function, "open", None)
        if opener is not None:
            try:
                opener(self.pctx)
            except Exception as exc:
                raise OperatorError(self.name, "<open>", exc) from exc

    # -- timers ----------------------------------------------------------------------------------
    def next_timer(self) -> float | None:
        return self.timers.next(TimeDomain.PROCESSING_TIME)

    def on_processing_time(self, now: float) -> Batch | None:
        return self._fire(TimeDomain.PROCESSING_TIME, now)

    def on_watermark(self, watermark: float) -> Batch | None:
        self.watermark = max(self.watermark, watermark)
        return self._fire(TimeDomain.EVENT_TIME, self.watermark)

    def _fire(self, domain: TimeDomain, until: float) -> Batch | None:
        out: list[Any] = []
        letters: list[DeadLetter] = []
        pctx, on_timer, side = self.pctx, self.function.on_timer, self.side
        pctx._time_domain = domain
        try:
            for ts, key in self.timers.pop_due(domain, until):
                emitted = len(side.out)
                try:
                    produced = on_timer(ts, pctx)
                    extend(out, list(produced) if produced is not None else None)
                except Exception as exc:
                    del side.out[emitted:]  # what it emitted for the failed timer is dropped
                    self.reject(f"<{domain.value} timer {ts} of key {key!r}>", exc, letters)
        finally:
            pctx._time_domain = None
        return with_letters(with_side(out or None, side.take()), letters)

    def restore(self, keyed: dict[int, dict[str, dict[Any, Any]]] | None, states: list[Any]) -> None:
        super().restore(keyed, states)
        self.timers.restore()

    # -- records ---------------------------------------------------------------------------------
    def process(self, batch: Batch) -> Batch | None:
        return self.run(batch, self.key, self.function.process_element)

    def run(self, batch: Batch, key_selector: Any, fn: Callable[[Any, Any], Any]) -> Batch | None:
        """Call `fn(record, ctx)` per record of `batch`, keyed by `key_selector`."""
        records, keys, groups = batch_keys(batch, key_selector, self.ctx.max_parallelism, self.name)
        backend, pctx, side = self.backend, self.pctx, self.side
        out: list[Any] = []
        letters: list[DeadLetter] = []
        if self.on_error is OnError.FAIL:
            record = None
            try:
                for record, key, kg in zip(records, keys, groups):
                    backend.set_current_key(key, kg)
                    extend(out, fn(record, pctx))
            except Exception as exc:
                raise self.record_error(record, exc) from exc
        else:
            for record, key, kg in zip(records, keys, groups):
                backend.set_current_key(key, kg)
                emitted = len(side.out)
                try:
                    produced = fn(record, pctx)
                    extend(out, list(produced) if produced is not None else None)
                except Exception as exc:
                    del side.out[emitted:]  # what it emitted for the failed record is dropped
                    self.reject(record, exc, letters)
        if side.out:
            out.extend(side.take())
        if self.watermark == END_OF_TIME and self.timers.next(TimeDomain.EVENT_TIME) is not None:
            # a timer registered after the input ended: no watermark will come to fire it
            fired = self._fire(TimeDomain.EVENT_TIME, self.watermark)
            if fired:
                out.extend(fired)  # its dead letters too: letters need not come last
        return with_letters(out, letters)

