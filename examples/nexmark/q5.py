"""Nexmark q5, hot items: the auctions with the most bids in each sliding window.

The Nexmark project's q5 counts bids per auction in windows of 10 s sliding by 2 s (HOP, aligned
to the epoch), and emits, per window, every auction whose count is the window's largest (ties
all come out). The original query used an hour sliding by a minute.

- The count is Epochal's window operator (`Sliding(10, 2)`, shared slices: a bid updates one
  2 s slice, not five windows), keyed by auction; a window's counts come out when the watermark
  passes its end.
- The maximum per window is global, over every auction: each batch of counts is first reduced
  to its own maxima per window (vectorized, exact: the largest count of a window is the largest
  of the batches' maxima), then `HotItems`, keyed by window end, keeps the best auctions and
  emits them when the watermark reaches the window's end (every count of the window is in by
  then: the window operator emits its results before it forwards that watermark).

Results are `(auction, num, window_start, window_end)`: the SQL's two columns, with the window.

Columnar: the bid selection (`map_batches`), the windowed count (the window operator's Arrow
path) and the per-batch maxima (numpy) are vectorized; `HotItems` is per record on the few
rows left (about one per window and upstream subtask).

    python examples/nexmark/q5.py [--events N] [--parallelism P] [--rate EVENTS_PER_SECOND]
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable
from typing import Any

import numpy as np
import pyarrow as pa

from epochal import DataStream, KeyedProcessFunction, ProcessContext
from epochal.connectors.nexmark import EventKind, bids
from epochal.connectors.nexmark.flat import flat_columns
from epochal.windows import Sliding

NAME = "q5"
DESCRIPTION = "hot items: the auctions with the most bids per 10 s window sliding by 2 s"
# What it reads of Parquet files: as Spark, only the columns it uses.
READS = flat_columns({EventKind.BID: ["auction"]})
COLUMNS = ("auction", "num", "window_start", "window_end")  # of each result tuple, for the printed summary
WINDOW = Sliding(size=10.0, slide=2.0)


def bid_auctions(events: pa.RecordBatch) -> pa.RecordBatch:
    """A batch of events → its bids' auction and event time."""
    return bids(events).select(["auction", "dateTime"])


def window_maxima(counts: pa.RecordBatch) -> pa.RecordBatch:
    """A batch of window counts → the rows whose count is the largest of their window in it."""
    ends = counts.column("window_end").to_numpy(zero_copy_only=False)
    count = counts.column("count").to_numpy(zero_copy_only=False)
    distinct, which = np.unique(ends, return_inverse=True)
    best = np.zeros(len(distinct), dtype=count.dtype)
    np.maximum.at(best, which, count)
    return counts.filter(pa.array(count == best[which]))


class HotItems(KeyedProcessFunction):
    """Per window (keyed by its end): the largest count so far and the auctions that have it."""

    def open(self, ctx: ProcessContext) -> None:
        self.best = ctx.value_state("best", default=0)
        self.auctions = ctx.list_state("auctions")  # (auction, window_start)

    def process_element(self, value: Any, ctx: ProcessContext) -> Iterable[Any] | None:
        auction, window_start, window_end, count = value
        best = self.best.value()
        if count > best:
            self.best.update(count)
            self.auctions.update([(auction, window_start)])
            ctx.timers.register_event_time(window_end)
        elif count == best:
            self.auctions.add((auction, window_start))
        return None

    def on_timer(self, timestamp: float, ctx: ProcessContext) -> Iterable[Any] | None:
        best = self.best.value()
        out = [(auction, best, start, timestamp) for auction, start in self.auctions.get()]
        self.best.clear()
        self.auctions.clear()
        return out


def query(events: DataStream) -> DataStream:
    """The Nexmark events with watermarks → `(auction, num, window_start, window_end)`."""
    return (events.map_batches(bid_auctions, name="q5-bids")
            .key_by("auction")
            .window(WINDOW)
            .count(name="q5-counts")
            .map_batches(window_maxima, name="q5-batch-maxima")
            .key_by("window_end")
            .process(HotItems(), name="q5-hot-items").uid("q5-hot-items"))


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import harness

    harness.main(query, NAME, DESCRIPTION, columns=COLUMNS)
