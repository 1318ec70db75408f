"""A task's output side: each outgoing edge's partitioner and the channels it routes to."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any, Protocol

from ...plan.specs import PartitionKind
from ...state.keygroups import RoutingTable
from ..wire.elements import Barrier, Batch
from .partition import Partitioner


class OutputChannel(Protocol):
    """The producer's end of a channel: bounded, non-blocking."""

    def has_capacity(self) -> bool: ...
    def send(self, element: Any) -> None: ...


class OutputGate:
    """The task's outgoing edges: a partitioner and the channels it routes to, per edge."""

    def __init__(
        self,
        edges: Sequence[tuple[Partitioner, Sequence[OutputChannel]]],
        loop_edges: frozenset[int] = frozenset(),
        head_edges: frozenset[int] = frozenset(),
    ) -> None:
        self.edges = list(edges)
        self.channels = [ch for _, chans in self.edges for ch in chans]
        # channels of edges inside a loop: where termination probes go
        self.loop_channels = [ch for i, (_, chans) in enumerate(self.edges) if i in loop_edges for ch in chans]
        # channels into a loop head, which takes barriers ahead of its queue (`task.loop_cut`)
        self.head_channels = [i in head_edges for i, (_, chans) in enumerate(self.edges) for _ in chans]
        self._to_heads = any(self.head_channels)

    def emit(self, batch: Batch) -> None:
        for partitioner, channels in self.edges:
            for target, piece in partitioner.split(batch):
                channels[target].send(piece)

    def broadcast(self, element: Any) -> None:
        if self._to_heads and type(element) is Barrier:
            marked = dataclasses.replace(element, at_loop_head=True)
            for ch, to_head in zip(self.channels, self.head_channels):
                ch.send(marked if to_head else element)
            return
        for ch in self.channels:
            ch.send(element)

    def broadcast_loop(self, element: Any) -> None:
        for ch in self.loop_channels:
            ch.send(element)

    def reroute(self, table: RoutingTable) -> None:
        """Key-group edges into vertices of the table's parallelism route by it from now on."""
        for partitioner, channels in self.edges:
            if partitioner.kind is PartitionKind.KEY_GROUP and len(channels) == table.parallelism:
                partitioner.reroute(table.owners)

    def has_capacity(self) -> bool:
        for ch in self.channels:
            if not ch.has_capacity():
                return False
        return True
