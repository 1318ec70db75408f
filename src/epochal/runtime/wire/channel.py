"""Bounded FIFO channels between tasks.

The capacity (in batches) is what turns a slow consumer into a slow producer: a task does not
run while any of its output channels is full (credit-style backpressure, dissertation §3.4, flow control).
A task may overshoot by the output of one step, so one step never blocks half-way. A loop's
back-edge is *elastic* (never full): otherwise a loop whose channels all fill would wait on
itself; the loop head reads feedback first once it piles up (dissertation §6.4, cyclic flow control).
A channel that crosses processes has the same interface (`runtime.wire.network`).

An unaligned barrier is a *priority* element: a channel counts the ones it holds, so that its
consumer can take one out of the queue ahead of the data before it (`take_priority_barrier`)
without scanning queues on every step (`runtime.unaligned`).

A channel tells its two ends when something changed (`ChannelWatch`): the consumer's gate when
an element arrived, the producer's gate when the channel filled up and when it has room again.
So neither gate scans its channels to learn what it may do, and a host steps only the tasks
that something happened to: at 128 subtasks a task has 128 inputs and 128 outputs per keyed
edge, and a scan per step was most of the in-process host's time (docs/concepts/scale.md).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import final

from .elements import Barrier, Element


@dataclass(frozen=True, slots=True)
class ChannelStatistics:
    """A snapshot of a channel's load, for backpressure metrics."""

    queued: int
    capacity: int
    sent: int


Hook = Callable[[], None]


def _nothing() -> None:
    pass


@dataclass(slots=True)
class ChannelWatch:
    """Who to tell when a channel changes: set by the gates at its two ends.

    `arrived`: an element was queued (the consumer may read). `filled`: the channel has just
    become full (the producer must wait). `freed`: it has room again after being full.
    """

    arrived: Hook = _nothing
    filled: Hook = _nothing
    freed: Hook = _nothing


@final
class LocalChannel:
    """A FIFO queue of elements between two tasks in one process.

    Args:
        capacity: batches the channel holds before its producer is held back. Small values
            propagate backpressure sooner and bound memory; large ones smooth bursts.
    """

    __slots__ = ("_queue", "capacity", "_sent", "name", "elastic", "priority", "watch")

    def __init__(self, capacity: int, name: str = "", elastic: bool = False) -> None:
        if capacity < 1:
            raise ValueError("channel capacity must be at least 1")
        self._queue: deque[Element] = deque()
        self.capacity = capacity
        self._sent = 0
        self.name = name
        self.elastic = elastic  # a loop's back-edge: never holds its producer back
        self.priority = 0  # unaligned barriers queued
        self.watch = ChannelWatch()

    def has_capacity(self) -> bool:
        return self.elastic or len(self._queue) < self.capacity

    def send(self, element: Element) -> None:
        queue = self._queue
        queue.append(element)
        self._sent += 1
        if type(element) is Barrier and element.overtakes:
            self.priority += 1
        watch = self.watch
        if len(queue) == self.capacity and not self.elastic:
            watch.filled()
        watch.arrived()

    def take_priority_barrier(self) -> tuple[list[Element], Barrier]:
        """Take the first unaligned barrier out of the queue, with copies of what is ahead of it."""
        self.priority -= 1
        taken = take_priority_barrier(self._queue)
        if len(self._queue) == self.capacity - 1 and not self.elastic:
            self.watch.freed()
        return taken

    def poll(self) -> Element | None:
        queue = self._queue
        if not queue:
            return None
        element = queue.popleft()
        if len(queue) == self.capacity - 1 and not self.elastic:  # one leaves at a time: it passes here
            self.watch.freed()
        return element

    def peek(self) -> Element | None:
        """The element `poll` would return next, left in place."""
        return self._queue[0] if self._queue else None

    def __len__(self) -> int:
        return len(self._queue)

    def __bool__(self) -> bool:
        return bool(self._queue)

    def statistics(self) -> ChannelStatistics:
        return ChannelStatistics(len(self._queue), self.capacity, self._sent)


def take_priority_barrier(queue: deque[Element]) -> tuple[list[Element], Barrier]:
    """Remove the first unaligned barrier from `queue`; returns what was ahead of it (left in
    the queue, in order) and the barrier. The caller knows there is one (its `priority` count)."""
    ahead: list[Element] = []
    for i, element in enumerate(queue):
        if type(element) is Barrier and element.overtakes:
            del queue[i]
            return ahead, element
        ahead.append(element)
    raise AssertionError("no unaligned barrier in the queue")
