"""A task's input side: reading its channels, joining queued batches, aligning barriers.

Channels are read round robin, FIFO per channel; an input blocked by barrier alignment (ABS §4.2,
Algorithm 1, in `aligner`) is skipped until the alignment completes. Batches queued right behind
each other on one channel are joined before they reach the operator chain, since a keyed shuffle
cuts batches into one piece per consumer and per-batch costs then dominate. The gate also times
alignment (first barrier to snapshot), which the checkpoint statistics report.

The gate never scans its inputs (a keyed edge gives a task one per upstream subtask: 128 at
parallelism 128). Each channel tells it when an element arrives (`ChannelWatch.arrived`); the
gate keeps the inputs that may hold something in a rotation, drops one when it is found empty,
parks one blocked by alignment until the alignment ends, and reads the rest round robin. Finding
the next input to read is O(1) amortised, whatever the number of inputs. A channel that cannot
tell (a test's fake) makes the gate scan as it used to.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import pyarrow as pa

from ..wire.elements import Barrier, Element
from .aligner import AlignStep, BarrierAligner

# Arrow batches queued on one channel are joined up to this many rows (`InputGate._join_arrow`).
# Rows are cheap in columnar operators; the cap bounds the copy and the batch's memory.
ARROW_JOIN_ROWS = 65_536


class InputChannel(Protocol):
    """The consumer's end of a channel: FIFO, non-blocking."""

    priority: int  # unaligned barriers queued (`runtime.task.in_flight`)

    def poll(self) -> Any: ...
    def peek(self) -> Any: ...
    def __len__(self) -> int: ...
    def take_priority_barrier(self) -> tuple[list[Element], Barrier]: ...


def _nothing() -> None:
    pass


class InputGate:
    """The inputs of one task: which to read next, what to read, and barrier alignment.

    Args:
        channels: the task's input channels, in the order the job graph wires them.
        back_edges: indices of the channels that close a loop (never blocked, ABS §4.3).
        batch_size: record lists are joined up to this many records.
        feedback_threshold: for a loop head, a back-edge holding more queued elements than this is
            read first, so a heavy loop drains before new input enters it (dissertation §6.4,
            cyclic flow control).
    """

    def __init__(
        self,
        channels: Sequence[InputChannel],
        back_edges: frozenset[int],
        batch_size: int,
        feedback_threshold: int | None = None,
    ) -> None:
        self.channels = list(channels)
        self.back_edges = back_edges
        self.aligner = BarrierAligner(len(self.channels), back_edges)
        self.batch_size = batch_size
        self.feedback_threshold = feedback_threshold
        self._next = 0
        self._alignment_started: float | None = None
        self.wake: Callable[[], None] = _nothing  # called on every arrival: the task's host steps it
        n = len(self.channels)
        # inputs that may hold something, in reading order; `_listed[i]`: i is in it (or parked)
        self._rotation: deque[int] = deque(range(n))
        self._listed = bytearray(b"\x01" * n)
        self._parked: list[int] = []  # listed inputs blocked by an alignment, until it unblocks them
        self._parked_at = 0  # `aligner.releases` when they were parked
        self._priority: set[int] = set()  # inputs that received an unaligned barrier
        self._lengths = [len(ch) for ch in self.channels]  # kept as elements arrive and are read (metrics)
        self._watched = all(hasattr(ch, "watch") for ch in self.channels)
        if self._watched:
            for i, ch in enumerate(self.channels):
                ch.watch.arrived = self._arrival(i)  # type: ignore[attr-defined]

    def _arrival(self, idx: int) -> Callable[[], None]:
        channel, listed, rotation, priority = self.channels[idx], self._listed, self._rotation, self._priority
        lengths = self._lengths

        def arrived() -> None:
            lengths[idx] += 1
            if not listed[idx]:
                listed[idx] = 1
                rotation.append(idx)
            if channel.priority:
                priority.add(idx)
            self.wake()

        return arrived

    def __len__(self) -> int:
        return len(self.channels)

    def queued(self) -> tuple[int, int]:
        """Elements waiting in the fullest channel and in all (live metrics: a full input is a
        slow consumer); kept as they come and go, not counted per report."""
        lengths = self._lengths if self._watched else list(map(len, self.channels))
        return max(lengths, default=0), sum(lengths)

    def take_priority_barrier(self, idx: int) -> tuple[list[Element], Barrier]:
        """Input `idx`'s first unaligned barrier, out of its queue (`in_flight`)."""
        channel = self.channels[idx]
        taken = channel.take_priority_barrier()
        self._lengths[idx] = len(channel)
        return taken

    def priority_channels(self) -> list[int]:
        """The inputs that hold an unaligned barrier, to be taken ahead of the data before it."""
        if not self._watched:
            return [i for i, ch in enumerate(self.channels) if ch.priority]
        priority = self._priority  # the arrivals' set: changed in place
        if priority:
            channels = self.channels
            priority.difference_update([i for i in priority if not channels[i].priority])
        return sorted(priority)

    def priority_queued(self) -> bool:
        """Some input holds an unaligned barrier, to be taken ahead of the data before it."""
        if not self._watched:
            return any(ch.priority for ch in self.channels)
        return bool(self._priority) and bool(self.priority_channels())

    def readable(self) -> int | None:
        """The channel to read next, or None if no unblocked channel holds anything."""
        channels, aligner = self.channels, self.aligner
        if self.feedback_threshold is not None:  # piled-up feedback first
            for i in self.back_edges:
                if len(channels[i]) > self.feedback_threshold and not aligner.is_blocked(i):
                    return i
        if not self._watched:
            return self._scan()
        rotation, listed = self._rotation, self._listed
        parked = self._parked
        if parked and aligner.releases != self._parked_at:  # unblocked since: read them again
            rotation.extend(parked)
            parked.clear()
        while rotation:
            idx = rotation[0]
            if not channels[idx]:
                rotation.popleft()
                listed[idx] = 0
            elif aligner.is_blocked(idx):
                if not parked:
                    self._parked_at = aligner.releases
                parked.append(rotation.popleft())
            else:
                return idx
        return None

    def _scan(self) -> int | None:
        channels, aligner = self.channels, self.aligner
        n = len(channels)
        for i in range(n):
            idx = (self._next + i) % n
            if channels[idx] and not aligner.is_blocked(idx):
                return idx
        return None

    def peek(self) -> Any:
        """The element `poll` would return next (before joining), left in place; None if none."""
        idx = self.readable()
        return None if idx is None else self.channels[idx].peek()

    def poll(self) -> tuple[int, Any] | None:
        """The next element and its channel; queued batches behind a batch come joined."""
        idx = self.readable()
        if idx is None:
            return None
        self._next = (idx + 1) % len(self.channels)
        rotation = self._rotation
        if self._watched and rotation and rotation[0] == idx:
            rotation.rotate(-1)  # round robin: its next element waits for the others' turn
        channel = self.channels[idx]
        element = channel.poll()
        if type(element) is list and len(element) < self.batch_size:
            element = self._join_records(channel, element)
        elif type(element) is pa.RecordBatch and element.num_rows < ARROW_JOIN_ROWS:
            element = self._join_arrow(channel, element)
        self._lengths[idx] = len(channel)
        return idx, element

    # -- alignment -------------------------------------------------------------------------------
    def on_barrier(self, channel: int, barrier: Barrier) -> AlignStep:
        """Hand a barrier to the aligner; the first regular one of a checkpoint starts its clock."""
        if channel not in self.back_edges and not self.aligner.is_aligning:
            self._alignment_started = time.perf_counter()
        return self.aligner.on_barrier(channel, barrier)

    def take_alignment_ms(self) -> float:
        """How long the alignment that just completed took (0 for a checkpoint not aligned here)."""
        started, self._alignment_started = self._alignment_started, None
        return 0.0 if started is None else (time.perf_counter() - started) * 1000

    def reset_alignment_clock(self) -> None:
        """A checkpoint triggered directly (a source): no alignment to time."""
        self._alignment_started = None

    # -- joining ---------------------------------------------------------------------------------
    def _join_records(self, channel: InputChannel, batch: list[Any]) -> list[Any]:
        """Join the record lists queued right behind `batch` on the same channel, up to a batch.

        Joining only *consecutive* lists of one channel keeps FIFO order and never moves a record
        across a barrier or any other in-band event.
        """
        limit = self.batch_size
        nxt = channel.peek()
        if type(nxt) is not list or len(batch) + len(nxt) > limit:
            return batch
        merged = list(batch)  # never extend a list another channel or operator may share
        while type(nxt) is list and len(merged) + len(nxt) <= limit:
            merged.extend(channel.poll())
            nxt = channel.peek()
        return merged

    def _join_arrow(self, channel: InputChannel, batch: pa.RecordBatch) -> pa.RecordBatch:
        """Join the Arrow batches of one schema queued right behind `batch`, up to `ARROW_JOIN_ROWS`.

        A vectorized operator pays a fixed cost per batch (key encoding, index lookup, ranking,
        about 0.4 ms on the word count), so a backlog of small batches is worth one copy into a
        larger one. Only what is already queued is joined: nothing waits for more input.
        """
        parts, rows = [batch], batch.num_rows
        nxt = channel.peek()
        while (
            type(nxt) is pa.RecordBatch
            and rows + nxt.num_rows <= ARROW_JOIN_ROWS
            and nxt.schema.equals(batch.schema)
        ):
            parts.append(channel.poll())
            rows += nxt.num_rows
            nxt = channel.peek()
        if len(parts) == 1:
            return batch
        return pa.Table.from_batches(parts).combine_chunks().to_batches()[0]  # pyarrow < 19: no concat_batches
