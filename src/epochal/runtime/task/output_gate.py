"""A task's output side: each outgoing edge's partitioner and the channels it routes to.

Whether the task may run depends on its outputs (it does not while one is full), and a keyed
edge gives it one per downstream subtask. So the gate never asks them all: each channel tells it
when it fills up and when it has room again (`ChannelWatch`), the gate keeps the full ones, and
`has_capacity` is O(1). The channel that frees room wakes the task (`wake`): the host needs
not look at a task held back by a full output until then.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
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
        loop_edges: Mapping[int, frozenset[int]] | None = None,
        head_edges: frozenset[int] = frozenset(),
        own_loop: int | None = None,
    ) -> None:
        self.edges = list(edges)
        self.channels = [ch for _, chans in self.edges for ch in chans]
        loops = loop_edges or {}
        own = loops.get(own_loop, frozenset()) if own_loop is not None else frozenset()
        # per loop (its head's vertex), the channels of its edges: where its probes go, with
        # whether the channel goes into the loop this task heads (`loop_probes.ScopeRounds._ready`)
        self.loop_channels = {
            loop: [(ch, i in own) for i, (_, chans) in enumerate(self.edges) if i in positions for ch in chans]
            for loop, positions in loops.items()
        }
        # channels into a loop head, which takes barriers ahead of its queue (`task.loop_cut`)
        self.head_channels = [i in head_edges for i, (_, chans) in enumerate(self.edges) for _ in chans]
        self._to_heads = any(self.head_channels)
        self.wake: Callable[[], None] = _nothing  # room again in a full channel: the host steps the task
        self._full: set[int] = {i for i, ch in enumerate(self.channels) if not ch.has_capacity()}
        self._watched = all(hasattr(ch, "watch") for ch in self.channels)
        if self._watched:
            for i, ch in enumerate(self.channels):
                watch = ch.watch  # type: ignore[attr-defined]
                watch.filled, watch.freed = self._filled(i), self._freed(i)

    def _filled(self, idx: int) -> Callable[[], None]:
        full = self._full
        return lambda: full.add(idx)

    def _freed(self, idx: int) -> Callable[[], None]:
        full = self._full

        def freed() -> None:
            full.discard(idx)
            if not full:
                self.wake()

        return freed

    def emit(self, batch: Batch) -> None:
        for partitioner, channels in self.edges:
            for target, piece in partitioner.split(batch):
                channels[target].send(piece)

    def broadcast(self, element: Any, heads_only: bool = False) -> None:
        """`element` on every channel; a barrier marked on those into a loop head.

        `heads_only`: a barrier from a task whose output ended goes into the loop heads still, since
        its end of input may be queued at a head behind data the head does not read while the loop
        is busy (feedback first); the head takes the barrier ahead of both (`task.loop_cut`), where
        its cut would otherwise wait for that input until the loop drained (issue 37: a 7.8 s
        checkpoint on Spark). Other consumers saw the end of input: they expect no barrier.
        """
        if self._to_heads and type(element) is Barrier:
            marked = dataclasses.replace(element, at_loop_head=True)
            for ch, to_head in zip(self.channels, self.head_channels):
                if to_head or not heads_only:
                    ch.send(marked if to_head else element)
            return
        if heads_only:
            return
        for ch in self.channels:
            ch.send(element)

    def broadcast_loop(self, loop: int, element: Any, into_own: Any = None) -> None:
        """A probe of `loop` goes on along that loop's edges only; `into_own`, if given, on the
        edges into the loop this task heads, when `loop` encloses it."""
        for ch, own in self.loop_channels.get(loop, ()):
            ch.send(into_own if own and into_own is not None else element)

    def reroute(self, table: RoutingTable) -> None:
        """Key-group edges into vertices of the table's parallelism route by it from now on."""
        for partitioner, channels in self.edges:
            if partitioner.kind is PartitionKind.KEY_GROUP and len(channels) == table.parallelism:
                partitioner.reroute(table.owners)

    def has_capacity(self) -> bool:
        if self._watched:
            return not self._full
        for ch in self.channels:
            if not ch.has_capacity():
                return False
        return True


def _nothing() -> None:
    pass
