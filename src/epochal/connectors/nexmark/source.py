"""`NexmarkSource`: the Nexmark generator as a replayable Epochal source.

The stream is a sequence of *slots*; slot `p` carries event `p` (or, with an out-of-order
group, another event of the same group: `order.EmissionOrder`). The splits interleave: of
`n` splits, split `k` owns slots `k, k + n, k + 2n, ...`. Contiguous ranges would give each
split its own stretch of event time, far from the others', so the watermark (the minimum over
splits) would wait for the slowest stretch, and a paced source would have split `k` idle until
its stretch came due; interleaved, every split walks the same event-time line at `1/n` of the
rate, and a subtask's splits stay within a few inter-event delays of each other.

A split's position is its next slot (without out-of-orderness, the next event id): a reader
resumes there by generating the slots' events directly, since every event is a pure function of
(seed, event id) (`generator`), with no replay from the start (dissertation §3.3.1.2: a
replayable source). Readers generate a chunk of slots at a time and hand out zero-copy slices,
so small batches do not pay the generator's per-call overhead.
"""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from ...api.connector import Source, SplitReader
from ...validation import check_instance, check_int
from .config import NexmarkConfig, event_clock
from .counter_random import stream_key
from .generator import NexmarkGenerator
from .order import MAX_GROUP, EmissionOrder
from .schema import EVENT_SCHEMA

_SHUFFLE = 100  # the stream key of the out-of-order shuffle (apart from the generator's)
_CHUNK = 32_768  # slots generated per call to the generator, at least (its overhead is per call)


@dataclass(frozen=True, slots=True)
class NexmarkSplit:
    """Slots `index, index + count, index + 2 * count, ...` of the stream."""

    split_id: str
    index: int
    count: int


class NexmarkSource(Source):
    """Nexmark's auction events (persons, auctions, bids), generated with Beam's semantics.

    One stream of Arrow batches with `schema.EVENT_SCHEMA`: a `kind` column, the event time
    `dateTime` (`timestamp[ms, UTC]`), and a struct column per kind; `schema.bids(batch)` and
    its siblings select one kind. Deterministic for a seed, whatever the parallelism, batch
    size or speed of the job.

    Args:
        events: how many events, after which the source ends; None: unbounded.
        events_per_second: the source's total rate in wall time, shared by its splits (each
            reader hands out only the events that are due, and an empty batch until then);
            None: as fast as it is read. A paced source's event time advances at the same rate
            unless `config.event_rate` says otherwise.
        seed: selects the event stream.
        out_of_order_group: events are emitted shuffled within groups of this many
            consecutive ids (1: in event-id order).
        splits: how many splits (interleaved slots). Give an unbounded source at least one
            split per source subtask, and no more without a watermark strategy: a subtask reads
            its splits one after another, and an unbounded split never ends.
        batch_size: events per batch at most (besides the environment's `batch_size`).
        config: the generator's other parameters (Beam's defaults).

    Example:
        >>> from epochal.connectors.nexmark import NexmarkSource, bids
        >>> source = NexmarkSource(events=100, seed=1)
        >>> batch = source.open_split(source.splits()[0], None).read(100)
        >>> batch.num_rows, bids(batch).num_rows
        (100, 92)
    """

    def __init__(
        self,
        events: int | None = None,
        events_per_second: int | None = None,
        seed: int = 0,
        out_of_order_group: int = 1,
        splits: int = 1,
        batch_size: int | None = None,
        config: NexmarkConfig | None = None,
    ) -> None:
        self.events = None if events is None else check_int("events", events, minimum=0)
        self.events_per_second = (
            None if events_per_second is None else check_int("events_per_second", events_per_second)
        )
        self.seed = check_int("seed", seed, minimum=None)
        self.out_of_order_group = check_int("out_of_order_group", out_of_order_group, maximum=MAX_GROUP)
        self.split_count = check_int("splits", splits)
        self.batch_size = None if batch_size is None else check_int("batch_size", batch_size)
        self.config = NexmarkConfig() if config is None else check_instance("config", config, NexmarkConfig)
        self._splits = [NexmarkSplit(f"nexmark-{k}-of-{splits}", k, splits) for k in range(splits)]

    def splits(self) -> Sequence[NexmarkSplit]:
        return self._splits

    def open_split(self, split: Any, position: Any | None) -> SplitReader:
        return NexmarkReader(self, split, position)

    def generator(self) -> NexmarkGenerator:
        """The generator of this source's events (for references computed outside a job)."""
        return NexmarkGenerator(self.config, event_clock(self.config, self.events_per_second), self.seed)

    def emission_order(self) -> EmissionOrder:
        """Which event each slot carries."""
        return EmissionOrder(stream_key(self.seed, _SHUFFLE), self.out_of_order_group, self.events)

    def slots(self, start: int, stop: int) -> pa.RecordBatch:
        """The events of slots `[start, stop)`, in slot order, unpaced: for references and
        benchmarks (the whole input of a bounded source is `slots(0, events)`)."""
        check_int("start", start, minimum=0)
        check_int("stop", stop, minimum=start, maximum=self.events)
        ids = self.emission_order().event_ids(np.arange(start, stop, dtype=np.int64))
        return self.generator().events(ids)


class NexmarkReader(SplitReader):
    """Reads one split from a slot; paced by the wall clock if the source has a rate."""

    def __init__(self, source: NexmarkSource, split: NexmarkSplit, position: int | None) -> None:
        if position is None:
            position = split.index
        elif (
            not isinstance(position, int)
            or position < split.index
            or (position - split.index) % split.count
        ):
            raise ValueError(f"{position!r} is not a position of split {split.split_id}")
        self.split = split
        self.next = position
        self.end = source.events
        self.batch_size = source.batch_size
        self.rate = source.events_per_second
        self.clock: Callable[[], float] = time.monotonic
        self._generator = source.generator()
        self._order = source.emission_order()
        self._start: float | None = None  # wall time at which `_start_slot` was due
        self._start_slot = 0
        self._chunk: pa.RecordBatch | None = None
        self._chunk_first = 0  # the slot of the chunk's first row

    def read(self, max_records: int) -> pa.RecordBatch | None:
        step = self.split.count
        if self.end is not None and self.next >= self.end:
            return None
        n = max_records if self.batch_size is None else min(max_records, self.batch_size)
        if self.end is not None:
            n = min(n, -(-(self.end - self.next) // step))
        if self.rate is not None:
            n = min(n, self._due())
            if n == 0:
                return _empty()
        batch = self._take(n)
        self.next += n * step
        return batch

    def position(self) -> int:
        return self.next

    def _due(self) -> int:
        """How many of this split's slots are due by now: the reader's first slot when it first
        reads, and slot `first + k` `k / rate` seconds later (to within a microsecond's worth of
        events, so that float rounding of the clock does not hold back a slot due on the dot)."""
        assert self.rate is not None
        now = self.clock()
        if self._start is None:
            self._start = now
            self._start_slot = self.next
        last_due = self._start_slot + math.floor((now - self._start) * self.rate + 1e-6)
        if last_due < self.next:
            return 0
        return (last_due - self.next) // self.split.count + 1

    def _take(self, n: int) -> pa.RecordBatch:
        step = self.split.count
        row = (self.next - self._chunk_first) // step
        if self._chunk is None or self.next < self._chunk_first or row + n > self._chunk.num_rows:
            size = max(n, _CHUNK)
            if self.end is not None:
                size = min(size, -(-(self.end - self.next) // step))
            slots = self.next + step * np.arange(size, dtype=np.int64)
            self._chunk = self._generator.events(self._order.event_ids(slots))
            self._chunk_first, row = self.next, 0
        return self._chunk.slice(row, n)


@functools.cache
def _empty() -> pa.RecordBatch:
    """An empty batch of events (built on first use: `pa.array` at import would import pandas)."""
    return pa.RecordBatch.from_arrays([pa.array([], field.type) for field in EVENT_SCHEMA], schema=EVENT_SCHEMA)
