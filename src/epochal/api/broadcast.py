"""Broadcast streams: rules or configuration sent to every subtask, kept in broadcast state.

`rules.broadcast(MapStateDescriptor("rules"))` declares the broadcast states (maps) the
operator it is connected to keeps; `stream.connect(rules_broadcast).process(function)` runs a
`BroadcastProcessFunction` (a stream not keyed) or a `KeyedBroadcastProcessFunction`. Only the
broadcast side writes the state, so every subtask holds the same copy, checkpointed once and
restored at any parallelism (`runtime.operators.broadcast`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Generic, TypeVar

from ..errors import GraphError
from ..plan.specs import BROADCAST
from .co_functions import MapStateDescriptor
from .stream import DataStream

T = TypeVar("T")


class BroadcastStream(Generic[T]):
    """A stream whose records go to every subtask of the operator it is connected to, with the
    broadcast states that operator keeps."""

    def __init__(self, stream: DataStream[T], states: Sequence[Any]) -> None:
        stream._operator_only("broadcast")
        names: list[str] = []
        for state in states:
            if not isinstance(state, MapStateDescriptor):
                raise TypeError(f"broadcast states are MapStateDescriptors, got {state!r} ({type(state).__name__})")
            if state.name in names:
                raise GraphError(f"the broadcast state {state.name!r} is declared twice")
            names.append(state.name)
        self.stream = stream
        self.names = tuple(names)

    @property
    def partitioned(self) -> DataStream[T]:
        """The stream, broadcast to every subtask of the next operator."""
        return self.stream._partitioned(BROADCAST)


__all__ = ["BroadcastStream", "MapStateDescriptor"]
