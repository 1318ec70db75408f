"""A task's input side: reading its channels, joining queued batches, aligning barriers.

Channels are read round robin, FIFO per channel; an input blocked by barrier alignment (ABS §4.2,
Algorithm 1, in `aligner`) is skipped until the alignment completes. Batches queued right behind
each other on one channel are joined before they reach the operator chain, since a keyed shuffle
cuts batches into one piece per consumer and per-batch costs then dominate. The gate also times
alignment (first barrier to snapshot), which the checkpoint statistics report.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
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

    def __len__(self) -> int:
        return len(self.channels)

    def queued(self) -> tuple[int, ...]:
        """Elements waiting in each channel (live metrics: a full input is a slow consumer)."""
        return tuple(len(ch) for ch in self.channels)

    def priority_queued(self) -> bool:
        """Some input holds an unaligned barrier, to be taken ahead of the data before it."""
        return any(ch.priority for ch in self.channels)

    def readable(self) -> int | None:
        """The channel to read next, or None if no unblocked channel holds anything."""
        channels, aligner = self.channels, self.aligner
        if self.feedback_threshold is not None:  # piled-up feedback first
            for i in self.back_edges:
                if len(channels[i]) > self.feedback_threshold and not aligner.is_blocked(i):
                    return i
        n = len(channels)
        for i in range(n):
            idx = (self._next + i) % n
            if channels[idx] and not aligner.is_blocked(idx):
                return idx
        return None

    def poll(self) -> tuple[int, Any] | None:
        """The next element and its channel; queued batches behind a batch come joined."""
        idx = self.readable()
        if idx is None:
            return None
        self._next = (idx + 1) % len(self.channels)
        channel = self.channels[idx]
        element = channel.poll()
        if type(element) is list and len(element) < self.batch_size:
            element = self._join_records(channel, element)
        elif type(element) is pa.RecordBatch and element.num_rows < ARROW_JOIN_ROWS:
            element = self._join_arrow(channel, element)
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
