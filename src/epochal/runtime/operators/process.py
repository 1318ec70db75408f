"""The keyed process operator: a user's `KeyedProcessFunction` with keyed state and timers."""

from __future__ import annotations

import heapq
import itertools
from typing import Any

from ...errors import OperatorError
from ...plan.specs import KeyedProcessSpec
from ...state.handles import ListState, MapState, ValueState
from ..elements import Batch
from ..keys import batch_keys
from .base import OperatorContext, extend
from .keyed import KeyedOperator

_TIMERS = "__timers__"


class ProcessContext:
    """What a keyed process function sees: the current key, its state, and timers.

    Passed to `open()` (register state there) and to every `process_element` / `on_timer` call.
    """

    def __init__(self, operator: KeyedProcessOperator) -> None:
        self._op = operator
        self._backend = operator.backend
        self._states: dict[str, Any] = {}

    @property
    def key(self) -> Any:
        """The key of the record (or timer) being processed."""
        return self._backend.current_key

    @property
    def subtask(self) -> int:
        return self._op.ctx.subtask

    def _register(self, name: str, handle: Any) -> Any:
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

    def register_processing_time_timer(self, timestamp: float) -> None:
        """Call `on_timer(timestamp, ctx)` for the current key once processing time reaches it."""
        self._op.register_timer(float(timestamp))

    def delete_processing_time_timer(self, timestamp: float) -> None:
        self._op.delete_timer(float(timestamp))


class KeyedProcessOperator(KeyedOperator):
    """A user's keyed process function, with keyed state and processing-time timers.

    Timers are keyed state (a tuple of timestamps per key), so they are checkpointed with the
    key group they belong to; the heap that orders them is rebuilt on restore.
    """

    def __init__(self, spec: KeyedProcessSpec) -> None:
        super().__init__(spec)
        self.function = spec.function
        self.key = spec.key
        self._heap: list[tuple[float, int, int, Any]] = []
        self._seq = itertools.count()

    def open(self, ctx: OperatorContext) -> None:
        super().open(ctx)
        self.pctx = ProcessContext(self)
        opener = getattr(self.function, "open", None)
        if opener is not None:
            try:
                opener(self.pctx)
            except Exception as exc:
                raise OperatorError(self.name, "<open>", exc) from exc

    # -- timers ----------------------------------------------------------------------------------
    def register_timer(self, ts: float) -> None:
        backend = self.backend
        timers = backend.get(_TIMERS, ())
        if ts not in timers:
            backend.put(_TIMERS, tuple(sorted(timers + (ts,))))
            heapq.heappush(self._heap, (ts, next(self._seq), backend.current_key_group, backend.current_key))

    def delete_timer(self, ts: float) -> None:
        timers = self.backend.get(_TIMERS, ())
        if ts in timers:
            rest = tuple(t for t in timers if t != ts)
            if rest:
                self.backend.put(_TIMERS, rest)
            else:
                self.backend.delete(_TIMERS)

    def next_timer(self) -> float | None:
        return self._heap[0][0] if self._heap else None

    def on_processing_time(self, now: float) -> Batch | None:
        out: list[Any] = []
        heap, backend = self._heap, self.backend
        while heap and heap[0][0] <= now:
            ts, _, kg, key = heapq.heappop(heap)
            backend.set_current_key(key, kg)
            timers = backend.get(_TIMERS, ())
            if ts not in timers:
                continue  # deleted, or fired already
            self.delete_timer(ts)
            try:
                extend(out, self.function.on_timer(ts, self.pctx))
            except Exception as exc:
                raise OperatorError(self.name, f"<timer {ts} of key {key!r}>", exc) from exc
        return out or None

    def restore(self, keyed: dict[int, dict[str, dict[Any, Any]]] | None, states: list[Any]) -> None:
        super().restore(keyed, states)
        for kg, key in list(self.backend.keys(_TIMERS)):
            self.backend.set_current_key(key, kg)
            for ts in self.backend.get(_TIMERS, ()):
                heapq.heappush(self._heap, (ts, next(self._seq), kg, key))

    # -- records ---------------------------------------------------------------------------------
    def process(self, batch: Batch) -> Batch | None:
        records, keys, groups = batch_keys(batch, self.key, self.ctx.max_parallelism, self.name)
        backend, fn, pctx = self.backend, self.function.process_element, self.pctx
        out: list[Any] = []
        record = None
        try:
            for record, key, kg in zip(records, keys, groups):
                backend.set_current_key(key, kg)
                extend(out, fn(record, pctx))
        except Exception as exc:
            raise OperatorError(self.name, record, exc) from exc
        return out

