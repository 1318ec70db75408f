"""Nexmark q7, highest bid: the bids with the highest price of each tumbling 10 s window.

The Nexmark project's q7 takes the largest price per 10 s tumbling window of bids and emits the
bids of that window with that price (ties all come out). Its SQL matches a bid to the window
whose end is within `[dateTime, dateTime + 10 s]`, both ends included, so a bid exactly on a
boundary would also be compared with the window before; this uses the window's own bounds,
`[start, end)`, as Beam's Query7 does. The original query used one-minute windows.

The maximum is global (over every auction), so the query has two steps:

- each batch of events is reduced to its bids that have the largest price of their window in
  that batch (vectorized: a window id per bid, a maximum per window, a filter; exact, since the
  window's largest price is the largest of the batches' maxima);
- `HighestBid`, keyed by window end, keeps the best bids so far and emits them when the
  watermark reaches the window's end (no bid of the window can come after that).

Results are `(auction, bidder, price, dateTime, extra)`, as in the SQL.

Columnar: the first step is one `map_batches` per batch and leaves a few rows per batch; the
second is per record on those.

    python examples/nexmark/q7.py [--events N] [--parallelism P] [--rate EVENTS_PER_SECOND]
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

NAME = "q7"
DESCRIPTION = "highest bid: the bids with the top price of each tumbling 10 s window"
COLUMNS = ("auction", "bidder", "price", "dateTime", "extra")  # of each result tuple, for the printed summary
WINDOW_MS = 10_000
BID_COLUMNS = ["auction", "bidder", "price", "dateTime", "extra"]
# What it reads of Parquet files: as Spark, only the columns it uses.
READS = flat_columns({EventKind.BID: BID_COLUMNS})


def top_bids_of_batch(events: pa.RecordBatch) -> pa.RecordBatch:
    """A batch of events → its bids with the top price of their window in the batch, with the
    window's end (ms) first."""
    bid = bids(events)
    time_ms = bid.column("dateTime").cast(pa.int64()).to_numpy()
    price = bid.column("price").to_numpy()
    window_end = time_ms - time_ms % WINDOW_MS + WINDOW_MS
    distinct, which = np.unique(window_end, return_inverse=True)
    best = np.zeros(len(distinct), dtype=price.dtype)
    np.maximum.at(best, which, price)
    keep = price == best[which]
    return pa.RecordBatch.from_arrays(
        [pa.array(window_end[keep]), *(bid.column(c).filter(pa.array(keep)) for c in BID_COLUMNS)],
        names=["window_end_ms", *BID_COLUMNS],
    )


class HighestBid(KeyedProcessFunction):
    """Per window (keyed by its end in ms): the top price so far and the bids that have it."""

    def open(self, ctx: ProcessContext) -> None:
        self.best = ctx.value_state("best", default=-1)
        self.bids = ctx.list_state("bids")

    def process_element(self, value: Any, ctx: ProcessContext) -> Iterable[Any] | None:
        window_end_ms, bid = value[0], value[1:]
        price, best = bid[2], self.best.value()
        if price > best:
            self.best.update(price)
            self.bids.update([bid])
            ctx.timers.register_event_time(window_end_ms / 1000)
        elif price == best:
            self.bids.add(bid)
        return None

    def on_timer(self, timestamp: float, ctx: ProcessContext) -> Iterable[Any] | None:
        out = self.bids.get()
        self.best.clear()
        self.bids.clear()
        return out


def query(events: DataStream) -> DataStream:
    """The Nexmark events with watermarks → the top bids of each window."""
    return (events.map_batches(top_bids_of_batch, name="q7-batch-maxima")
            .key_by("window_end_ms")
            .process(HighestBid(), name="q7-highest-bid").uid("q7-highest-bid"))


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import harness

    harness.main(query, NAME, DESCRIPTION, columns=COLUMNS)
