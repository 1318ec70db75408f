"""The keyed process operator: a user's `KeyedProcessFunction` with keyed state and timers.

Lifecycle (Flink's rich function and `CheckpointedFunction`): the function's `open(ctx)` runs
once per subtask after keyed and operator state were restored, `snapshot_state` at each
checkpoint, `close()` at the end. When its input ends, event-time timers fire with the last
watermark; processing-time timers still pending fire then too (`timers_at_end="fire"`) or are
handed to `on_end_of_input` (`"report"`), which runs once per subtask either way.

Under `on_error="skip"` or `"dead_letter"` a record (or a timer) the function fails on is
skipped or dead-lettered; what the function emitted for it is dropped, but state it changed
before it raised stays changed (as in Flink: state is not transactional per record).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from ...plan.specs import KeyedProcessSpec, OnError
from ...plan.time import time_of
from ...plan.two_inputs import BroadcastProcessSpec, KeyedCoProcessSpec
from ...state.handles import ListState, MapState, ValueState
from ...state.ttl import StateKind, StateTtlConfig, TtlListState, TtlMapState, TtlValueState
from ...state.ttl_cleanup import TtlStates
from ..keys import batch_keys
from ..watermarks import END_OF_TIME, NO_WATERMARK
from ..wire.elements import Batch
from .bad_records import DeadLetter, with_letters
from .base import OperatorContext, OperatorSnapshot, extend
from .keyed import KeyedOperator
from .lifecycle import UserFunctions
from .side_outputs import SideOutputs, with_side
from .subtask_view import SubtaskView, check_state_name
from .timers import KeyedTimers, PendingTimer, TimeDomain

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


class ProcessContext(SubtaskView):
    """What a keyed process function sees: the current key, its state, time and timers.

    Passed to `open()` (register state there) and to every `process_element` / `on_timer` call;
    it implements `epochal.ProcessContext` (the API layer's protocol).
    """

    _op: KeyedProcessOperator

    def __init__(self, operator: KeyedProcessOperator) -> None:
        self._op = operator
        self._backend = operator.backend
        self._states: dict[str, Any] = {}
        self._timers = Timers(operator.timers)
        self._time_domain: TimeDomain | None = None  # of the timer firing, in `on_timer`
        self._keyless = False  # in `on_end_of_input`: no current key
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
        """The key of the record (or timer) being processed; None in `on_end_of_input`."""
        return None if self._keyless else self._backend.current_key

    def _register(self, name: str, handle: H) -> H:
        check_state_name(name)
        existing = self._states.get(name)
        if existing is not None and type(existing) is not type(handle):
            raise ValueError(f"state {name!r} is already registered as {type(existing).__name__}")
        self._states[name] = handle
        return handle

    def value_state(self, name: str, default: Any = None, *, ttl: StateTtlConfig | None = None) -> ValueState[Any]:
        """Register (or fetch) the keyed value state `name`; with `ttl`, its value expires."""
        if ttl is None:
            return self._register(name, ValueState(self._backend, name, default))
        self._ttl(name, StateKind.VALUE, ttl)
        return self._register(name, TtlValueState(self._backend, name, default, ttl, self._op.ctx.clock.now))

    def list_state(self, name: str, *, ttl: StateTtlConfig | None = None) -> ListState[Any]:
        """Register (or fetch) the keyed list state `name`; with `ttl`, each element expires."""
        if ttl is None:
            return self._register(name, ListState(self._backend, name))
        self._ttl(name, StateKind.LIST, ttl)
        return self._register(name, TtlListState(self._backend, name, ttl, self._op.ctx.clock.now))

    def map_state(self, name: str, *, ttl: StateTtlConfig | None = None) -> MapState[Any, Any]:
        """Register (or fetch) the keyed map state `name`; with `ttl`, each entry expires."""
        if ttl is None:
            return self._register(name, MapState(self._backend, name))
        self._ttl(name, StateKind.MAP, ttl)
        return self._register(name, TtlMapState(self._backend, name, ttl, self._op.ctx.clock.now))

    def _ttl(self, name: str, kind: StateKind, ttl: object) -> None:
        if not isinstance(ttl, StateTtlConfig):
            raise TypeError(f"ttl must be a StateTtlConfig, got {ttl!r}")
        check_state_name(name)
        self._op.ttl.register(name, kind, ttl)

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
        self.timers_at_end = getattr(spec, "timers_at_end", "report")  # two inputs: reported
        self.watermark = NO_WATERMARK
        self.functions = UserFunctions(self.name, [self.function])
        self.side = SideOutputs(spec.side_outputs, spec.name)

    def open(self, ctx: OperatorContext) -> None:
        super().open(ctx)
        self.timers = KeyedTimers(self.backend)
        self.ttl = TtlStates(self.backend, ctx.clock.now)  # the states registered with a TTL
        self.pctx = self.context_type(self)

    def snapshot(self, checkpoint_id: int) -> OperatorSnapshot:
        """Keyed state (expired entries of TTL states left out of it) and operator state."""
        keyed = self.backend.snapshot(checkpoint_id)
        return OperatorSnapshot(keyed=self.ttl.filtered(keyed) if self.ttl else keyed,
                                state=self.operator_state(checkpoint_id))

    def start(self, states: list[Any]) -> None:
        """The function opens with keyed and operator state restored (`open(ctx)` registers it)."""
        functions = self.functions
        assert functions is not None
        functions.restore(self.ctx, states)
        functions.open(self.pctx)

    def end_input(self) -> Batch | None:
        """The input ended (event-time timers fired with the last watermark): pending
        processing-time timers fire or are reported, then `on_end_of_input` runs once."""
        out: list[Any] = []
        pending = self.timers.pending(TimeDomain.PROCESSING_TIME)
        if pending and self.timers_at_end == "fire":  # as if the clock reached the last of them
            fired = self._fire(TimeDomain.PROCESSING_TIME, pending[-1].timestamp)
            extend(out, fired)
            pending = self.timers.pending(TimeDomain.PROCESSING_TIME)  # what firing registered later
        hook = getattr(self.function, "on_end_of_input", None)
        letters: list[DeadLetter] = []
        if hook is not None:
            self.pctx._keyless = True
            try:
                extend(out, _listed(hook(pending, self.pctx)))
            except Exception as exc:
                self.reject("<end of input>", exc, letters)
            finally:
                self.pctx._keyless = False
        if self.timers.next(TimeDomain.EVENT_TIME) is not None:  # registered just now: due at once
            extend(out, self._fire(TimeDomain.EVENT_TIME, END_OF_TIME))
        return with_letters(out or None, letters)

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
        if self.ttl:  # expired entries of TTL states leave, a few per record (`state.ttl_cleanup`)
            self.ttl.cleanup(len(records))
        if side.out:
            out.extend(side.take())
        if self.watermark == END_OF_TIME and self.timers.next(TimeDomain.EVENT_TIME) is not None:
            # a timer registered after the input ended: no watermark will come to fire it
            fired = self._fire(TimeDomain.EVENT_TIME, self.watermark)
            if fired:
                out.extend(fired)  # its dead letters too: letters need not come last
        return with_letters(out, letters)


def _listed(produced: Any) -> list[Any] | None:
    return list(produced) if produced is not None else None


__all__ = ["KeyedProcessOperator", "PendingTimer", "ProcessContext", "Timers"]
