"""Broadcast state: a stream of rules or configuration, in every subtask of an operator.

Input 1 of a `BroadcastProcessSpec` operator is broadcast (every subtask receives every record);
`process_broadcast_element` may change the broadcast state (maps, by name), `process_element` on
input 0 may only read it (Flink's contract: every subtask sees the same broadcast records, so if
only they change the state, every subtask holds the same state).

Checkpoints: every subtask writes its own copy (as Flink does). At an aligned barrier (ABS,
Algorithm 1) the copies are equal, the barrier being behind every broadcast record before it on
every subtask. At an unaligned barrier they are not: a subtask fixes its state at the first
barrier of the checkpoint, and the broadcast records that barrier overtook are in that subtask's
in-flight log (`task/in_flight.py`), not in its state; another subtask may have processed them
before its barrier (the Chandy-Lamport cut of FLIP-76 differs per subtask). So a subtask restores
its own copy, which its own log completes; an unaligned checkpoint restores only at the
parallelism it was taken at. At another parallelism (an aligned checkpoint: a rescale, a
savepoint) every subtask reads the first copy, all being equal. Live migration moves only key
groups: every subtask, standbys included, already holds the broadcast state, as they receive the
broadcast input from the start.

The keyed variant (`KeyedBroadcastProcessFunction`) keeps keyed state and timers on input 0 as a
keyed process function does; `apply_to_keyed_state` lets a broadcast record visit every key of
the subtask that holds a given state.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from typing import Any

from ...plan.specs import OnError
from ...plan.two_inputs import BroadcastProcessSpec
from ...state.operator_state import with_operator_lists
from ..wire.batches import to_records
from ..wire.elements import Batch
from .bad_records import DeadLetter, with_letters
from .base import OperatorContext, OperatorSnapshot, RuntimeOperator, extend
from .co_process import CoContext, CoProcessOperator
from .process import KeyedProcessOperator, ProcessContext
from .side_outputs import with_side

_SNAPSHOT_KEY = "broadcast"


class ReadOnlyBroadcastState:
    """One broadcast map, as the data side sees it: read only."""

    __slots__ = ("_map", "name")

    def __init__(self, name: str, data: dict[Any, Any]) -> None:
        self.name = name
        self._map = data

    def get(self, key: Any, default: Any = None) -> Any:
        """The value under `key` (never change it in place: every subtask shares its meaning)."""
        return self._map.get(key, default)

    def contains(self, key: Any) -> bool:
        return key in self._map

    def keys(self) -> list[Any]:
        return list(self._map)

    def values(self) -> list[Any]:
        return list(self._map.values())

    def items(self) -> list[tuple[Any, Any]]:
        return list(self._map.items())

    def __iter__(self) -> Iterator[Any]:
        return iter(list(self._map))

    def __len__(self) -> int:
        return len(self._map)


class BroadcastState(ReadOnlyBroadcastState):
    """One broadcast map, as the broadcast side sees it: read and write."""

    __slots__ = ()

    def put(self, key: Any, value: Any) -> None:
        self._map[key] = value

    def remove(self, key: Any) -> None:
        self._map.pop(key, None)

    def clear(self) -> None:
        self._map.clear()


class BroadcastStates:
    """The broadcast maps of one operator subtask, by name, and their checkpoint."""

    def __init__(self, spec: BroadcastProcessSpec) -> None:
        self.operator = spec.name
        self.maps: dict[str, dict[Any, Any]] = {name: {} for name in spec.states}

    def map(self, descriptor: Any) -> tuple[str, dict[Any, Any]]:
        name = getattr(descriptor, "name", descriptor)
        found = self.maps.get(name)
        if found is None:
            raise ValueError(f"operator {self.operator!r}: no broadcast state {name!r}; the broadcast stream "
                             f"declares {sorted(self.maps)} (stream.broadcast(MapStateDescriptor(...)))")
        return name, found

    def snapshot(self) -> dict[str, Any]:
        """This subtask's copy, fixed (the writer reads it later). Each subtask writes its own:
        at an unaligned barrier the copies differ by the broadcast records in flight."""
        return {_SNAPSHOT_KEY: copy.deepcopy(self.maps)}

    def restore(self, states: list[Any], subtask: int, parallelism: int) -> None:
        """`subtask`'s own copy when the checkpoint was taken at `parallelism` (its in-flight log,
        replayed next, completes that copy and no other); else the first copy (checkpoints before
        every subtask wrote one held subtask 0's only; at another parallelism the checkpoint is
        aligned and every copy the same)."""
        own = states[subtask] if len(states) == parallelism else None
        chosen = own if _is_copy(own) else next((s for s in states if _is_copy(s)), None)
        if chosen is None:
            return
        for name, data in chosen[_SNAPSHOT_KEY].items():
            if name in self.maps:
                self.maps[name] = dict(data)


def _is_copy(state: Any) -> bool:
    return isinstance(state, dict) and _SNAPSHOT_KEY in state


class BroadcastContext(CoContext):
    """The broadcast side's context: read-write broadcast state (and, keyed, its keyed state)."""

    def __init__(self, operator: Any) -> None:
        super().__init__(operator)

    def broadcast_state(self, descriptor: Any) -> BroadcastState:
        """The broadcast map `descriptor` names (a `MapStateDescriptor`), read and write."""
        name, data = self._op.broadcast.map(descriptor)  # type: ignore[attr-defined]
        return BroadcastState(name, data)

    def apply_to_keyed_state(self, state: str, fn: Callable[[Any, Any], None]) -> None:
        """Call `fn(key, handle)` for every key of this subtask that holds keyed state `state`
        (keyed broadcast functions only; `handle` reads and writes that key's entry)."""
        op = self._op
        if not isinstance(op, KeyedBroadcastProcessOperator):
            raise TypeError("apply_to_keyed_state needs a KeyedBroadcastProcessFunction on a keyed stream")
        op.apply_to_keyed_state(state, fn)


class DataContext(CoContext):
    """The (non-keyed) data side's context: read-only broadcast state."""

    def broadcast_state(self, descriptor: Any) -> ReadOnlyBroadcastState:
        name, data = self._op.broadcast.map(descriptor)  # type: ignore[attr-defined]
        return ReadOnlyBroadcastState(name, data)


class KeyedDataContext(ProcessContext):
    """The keyed data side's context: a keyed process function's, with read-only broadcast state."""

    def broadcast_state(self, descriptor: Any) -> ReadOnlyBroadcastState:
        """The broadcast map `descriptor` names, read only."""
        name, data = self._op.broadcast.map(descriptor)  # type: ignore[attr-defined]
        return ReadOnlyBroadcastState(name, data)


def _run_broadcast(op: Any, batch: Batch, ctx: Any) -> Batch | None:
    """Call `process_broadcast_element(record, ctx)` per record (no current key)."""
    fn = op.function.process_broadcast_element
    side = op.side
    out: list[Any] = []
    letters: list[DeadLetter] = []
    for record in to_records(batch):
        emitted = len(side.out)
        try:
            produced = fn(record, ctx)
            extend(out, list(produced) if produced is not None else None)
        except Exception as exc:
            del side.out[emitted:]
            if op.on_error is OnError.FAIL:
                raise op.record_error(record, exc) from exc
            op.reject(record, exc, letters)
    return with_letters(with_side(out or None, side.take()), letters)


class BroadcastProcessOperator(CoProcessOperator):
    """A `BroadcastProcessFunction`: a stream not keyed, and a broadcast stream."""

    def __init__(self, spec: BroadcastProcessSpec) -> None:
        super().__init__(spec)
        self.broadcast = BroadcastStates(spec)

    def open(self, ctx: OperatorContext) -> None:
        RuntimeOperator.open(self, ctx)
        self.cctx = DataContext(self)
        self.bctx = BroadcastContext(self)

    def process(self, batch: Batch) -> Batch | None:
        return self._run(batch, self.function.process_element)

    def process_second(self, batch: Batch) -> Batch | None:
        return _run_broadcast(self, batch, self.bctx)

    def snapshot(self, checkpoint_id: int) -> OperatorSnapshot:
        lists = self.operator_state(checkpoint_id)
        return OperatorSnapshot(state=with_operator_lists(self.broadcast.snapshot(), lists))

    def restore(self, keyed: dict[int, dict[str, dict[Any, Any]]] | None, states: list[Any]) -> None:
        self.broadcast.restore(states, self.ctx.subtask, self.ctx.parallelism)


class KeyedBroadcastProcessOperator(KeyedProcessOperator):
    """A `KeyedBroadcastProcessFunction`: a keyed stream, with keyed state and timers, and a
    broadcast stream."""

    def __init__(self, spec: BroadcastProcessSpec) -> None:
        self.broadcast = BroadcastStates(spec)
        super().__init__(spec)

    context_type = KeyedDataContext

    def open(self, ctx: OperatorContext) -> None:
        self.bctx = BroadcastContext(self)
        super().open(ctx)

    def process_second(self, batch: Batch) -> Batch | None:
        return _run_broadcast(self, batch, self.bctx)

    def apply_to_keyed_state(self, state: str, fn: Callable[[Any, Any], None]) -> None:
        registered = self.pctx._states.get(state)
        if registered is None:
            raise ValueError(f"operator {self.name!r}: keyed state {state!r} is not registered (ctx.value_state, "
                             "list_state or map_state in open)")
        backend = self.backend
        for key_group, key in list(backend.keys(state)):
            backend.set_current_key(key, key_group)
            fn(key, registered)  # a handle acts on the current key

    def snapshot(self, checkpoint_id: int) -> OperatorSnapshot:
        keyed = super().snapshot(checkpoint_id)
        return OperatorSnapshot(keyed=keyed.keyed, state=with_operator_lists(self.broadcast.snapshot(), keyed.state))

    def restore(self, keyed: dict[int, dict[str, dict[Any, Any]]] | None, states: list[Any]) -> None:
        super().restore(keyed, states)
        if states:
            self.broadcast.restore(states, self.ctx.subtask, self.ctx.parallelism)


__all__ = [
    "BroadcastProcessOperator", "BroadcastState", "KeyedBroadcastProcessOperator", "ReadOnlyBroadcastState",
]
