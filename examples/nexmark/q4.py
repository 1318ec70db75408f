"""Nexmark q4, average closing price per category.

The Nexmark project's q4 joins each auction with its bids made within its lifetime
(`auction.dateTime <= bid.dateTime <= auction.expires`, both ends included), takes the highest
price per auction (the winning bid; auctions without such a bid drop out of the inner join),
and averages those prices per category, as a running aggregate: every closing auction updates
its category's average. (Beam's Query4 also requires the reserve price and averages over
sliding windows; this follows the SQL.)

- `WinningBid`, keyed by auction id: the auction's lifetime and its best price in keyed state,
  closed by an event-time timer 1 ms after `expires` (the watermark then promises no bid at or
  before `expires`). A bid that arrives before its auction (the generator names auctions up to
  10 ahead, and events may be out of order) waits in state until the watermark passes it: an
  auction that comes after that starts later than the bid, so the bid could never count.
- `CategoryAverage`, keyed by category: the sum and count of closing prices, emitting
  `(category, average, auctions)` per closed auction (the SQL's upsert stream, with the count).

Columnar: one `map_batches` per batch selects auctions and bids and reduces the bids to the
highest price per (auction, millisecond) (exact: the join only compares a bid's time with the
auction's bounds); the join and the average are per record in Python on what is left.

    python examples/nexmark/q4.py [--events N] [--parallelism P] [--rate EVENTS_PER_SECOND]
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable
from typing import Any

import pyarrow as pa

from epochal import DataStream, KeyedProcessFunction, ProcessContext
from epochal.connectors.nexmark import auctions, bids

NAME = "q4"
DESCRIPTION = "average closing price per category (auctions joined with their bids)"
COLUMNS = ("category", "average", "auctions")  # of each result tuple, for the printed summary

# The join's input: auctions (price null) and bids (expires_ms, category null), by auction.
JOIN_COLUMNS = ["auction", "time_ms", "expires_ms", "category", "price"]


def auctions_and_best_bids(events: pa.RecordBatch) -> pa.RecordBatch:
    """A batch of events → its auctions, and its bids' highest price per (auction, ms)."""
    auction = auctions(events)
    bid = bids(events)
    best = (pa.Table.from_arrays([bid.column("auction"), bid.column("dateTime").cast(pa.int64()),
                                  bid.column("price")], names=["auction", "time_ms", "price"])
            .group_by(["auction", "time_ms"], use_threads=False)
            .aggregate([("price", "max")]))
    a, b = auction.num_rows, best.num_rows
    return pa.RecordBatch.from_arrays(
        [
            pa.concat_arrays([auction.column("id"), best.column("auction").combine_chunks()]),
            pa.concat_arrays([auction.column("dateTime").cast(pa.int64()), best.column("time_ms").combine_chunks()]),
            pa.concat_arrays([auction.column("expires").cast(pa.int64()), pa.nulls(b, pa.int64())]),
            pa.concat_arrays([auction.column("category"), pa.nulls(b, pa.int64())]),
            pa.concat_arrays([pa.nulls(a, pa.int64()), best.column("price_max").combine_chunks()]),
        ],
        names=JOIN_COLUMNS,
    )


def _closing_time(expires_ms: int) -> float:
    """When an auction closes: 1 ms after it expires, in seconds (a bid at `expires` counts)."""
    return (expires_ms + 1) / 1000


class WinningBid(KeyedProcessFunction):
    """Per auction: (start ms, expires ms, category), the best price within the lifetime, and the
    bids that came before the auction; emits `(category, best price)` when the auction closes."""

    def open(self, ctx: ProcessContext) -> None:
        self.auction = ctx.value_state("auction")
        self.best = ctx.value_state("best")
        self.early = ctx.list_state("early")  # (time ms, price) of bids before their auction

    def process_element(self, value: Any, ctx: ProcessContext) -> Iterable[Any] | None:
        _id, time_ms, expires_ms, category, price = value
        if price is None:  # the auction
            self.auction.update((time_ms, expires_ms, category))
            early = self.early.get()
            if early:
                self.early.clear()
                prices = [p for t, p in early if time_ms <= t <= expires_ms]
                if prices:
                    self.best.update(max(prices))
            ctx.timers.register_event_time(_closing_time(expires_ms))
            return None
        auction = self.auction.value()
        if auction is None:
            self.early.add((time_ms, price))
            ctx.timers.register_event_time((time_ms + 1) / 1000)
        elif auction[0] <= time_ms <= auction[1]:
            best = self.best.value()
            if best is None or price > best:
                self.best.update(price)
        return None

    def on_timer(self, timestamp: float, ctx: ProcessContext) -> Iterable[Any] | None:
        auction = self.auction.value()
        if auction is not None:
            if timestamp != _closing_time(auction[1]):
                return None  # an early bid's timer: the auction took its bids already
            best = self.best.value()
            self.auction.clear()
            self.best.clear()
            return None if best is None else ((auction[2], best),)
        # no auction yet: the bids the watermark has passed can never count
        early = [(t, p) for t, p in self.early.get() if (t + 1) / 1000 > timestamp]
        if early:
            self.early.update(early)
        else:
            self.early.clear()
        return None


class CategoryAverage(KeyedProcessFunction):
    """Per category: the running average of closing prices."""

    def open(self, ctx: ProcessContext) -> None:
        self.total = ctx.value_state("total", default=0)
        self.count = ctx.value_state("count", default=0)

    def process_element(self, value: Any, ctx: ProcessContext) -> Iterable[Any] | None:
        category, price = value
        total, count = (self.total.value() or 0) + price, (self.count.value() or 0) + 1
        self.total.update(total)
        self.count.update(count)
        return ((category, total / count, count),)


def category_of(closed: tuple[int, int]) -> int:
    """The key of a closed auction: its category."""
    return closed[0]


def query(events: DataStream) -> DataStream:
    """The Nexmark events with watermarks → `(category, average, auctions)` per closed auction."""
    return (events.map_batches(auctions_and_best_bids, name="q4-select")
            .key_by("auction")
            .process(WinningBid(), name="q4-winning-bids").uid("q4-winning-bids")
            .key_by(category_of)
            .process(CategoryAverage(), name="q4-average").uid("q4-average"))


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import harness

    harness.main(query, NAME, DESCRIPTION, columns=COLUMNS)
