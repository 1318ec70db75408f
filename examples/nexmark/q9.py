"""Nexmark q9, winning bids: each auction with the bid that won it.

The Nexmark project's q9 joins each auction with its bids made within its lifetime
(`auction.dateTime <= bid.dateTime <= auction.expires`, both ends included) and keeps, per
auction, the bid with the highest price (the earliest of equal prices; here the lowest bidder id
of equal prices at the same millisecond). Auctions without such a bid drop out (an inner join).
q4 and q6 build on it.

The auctions and the bids are two streams connected into one keyed operator (`connect`), keyed
by auction id on both sides, with a `KeyedCoProcessFunction` (`WinningBids`) that keeps, per
auction, its lifetime and its best bid so far in keyed state. An event-time timer 1 ms after
`expires` closes the auction (the watermark then promises no bid at or before `expires`) and
emits the winner once: the SQL's `ROW_NUMBER() ... <= 1` as a final result rather than an
updating one. A bid that comes before its auction (the generator names auctions up to 10
ahead, and events may be out of order) waits in state until the watermark passes it: an
auction that comes after that starts later than the bid, so the bid could never count.

Output: `(auction, seller, category, expires_ms, bidder, price, bid_ms)` per auction with a
winning bid.

Columnar: one `map_batches` per side selects its kind; the bids side also keeps only the best
bid per (auction, millisecond) of each batch (exact: the join compares a bid's time with the
auction's bounds only); the join is per record on what is left.

    python examples/nexmark/q9.py [--events N] [--parallelism P] [--rate EVENTS_PER_SECOND]
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable
from typing import Any

import numpy as np
import pyarrow as pa

from epochal import DataStream, KeyedCoProcessFunction, ProcessContext
from epochal.connectors.nexmark import auctions, bids

NAME = "q9"
DESCRIPTION = "winning bids: each auction with its highest bid within its lifetime"
# of each result tuple, for the printed summary
COLUMNS = ("auction", "seller", "category", "expires_ms", "bidder", "price", "bid_ms")


def auction_rows(events: pa.RecordBatch) -> pa.RecordBatch:
    """A batch of events → its auctions: `(id, seller, category, time_ms, expires_ms)`."""
    auction = auctions(events)
    return pa.RecordBatch.from_arrays(
        [auction.column("id"), auction.column("seller"), auction.column("category"),
         auction.column("dateTime").cast(pa.int64()), auction.column("expires").cast(pa.int64())],
        names=["id", "seller", "category", "time_ms", "expires_ms"],
    )


def best_bid_rows(events: pa.RecordBatch) -> pa.RecordBatch:
    """A batch of events → per (auction, ms) of its bids the best one: `(auction, bidder, price,
    time_ms)`, the highest price, of equal prices the lowest bidder id."""
    bid = bids(events)
    table = pa.table({"auction": bid.column("auction"), "bidder": bid.column("bidder"),
                      "price": bid.column("price"), "time_ms": bid.column("dateTime").cast(pa.int64())})
    table = table.sort_by([("auction", "ascending"), ("time_ms", "ascending"), ("price", "descending"),
                           ("bidder", "ascending")])
    auction, ms = table.column("auction").to_numpy(), table.column("time_ms").to_numpy()
    first = np.ones(len(auction), dtype=bool)  # the first row of each (auction, ms): its best bid
    first[1:] = (auction[1:] != auction[:-1]) | (ms[1:] != ms[:-1])
    kept = table.filter(pa.array(first, pa.bool_()))
    return pa.RecordBatch.from_arrays([kept.column(c).combine_chunks() for c in kept.column_names],
                                      names=kept.column_names)


def _closing_time(expires_ms: int) -> float:
    """When an auction closes: 1 ms after it expires, in seconds (a bid at `expires` counts)."""
    return (expires_ms + 1) / 1000


def _better(bid: tuple[int, int, int], best: tuple[int, int, int] | None) -> bool:
    """Whether `(price, time_ms, bidder)` beats `best`: a higher price, then earlier, then a lower bidder."""
    if best is None:
        return True
    return (-bid[0], bid[1], bid[2]) < (-best[0], best[1], best[2])


class WinningBids(KeyedCoProcessFunction):
    """Per auction: (seller, category, start ms, expires ms), the best bid within the lifetime, and
    the bids that came before the auction; emits the winner when the auction closes."""

    def open(self, ctx: ProcessContext) -> None:
        self.auction = ctx.value_state("auction")
        self.best = ctx.value_state("best")  # (price, time ms, bidder)
        self.early = ctx.list_state("early")  # (price, time ms, bidder) of bids before their auction

    def process_element1(self, value: Any, ctx: ProcessContext) -> Iterable[Any] | None:
        _id, seller, category, time_ms, expires_ms = value
        self.auction.update((seller, category, time_ms, expires_ms))
        early = self.early.get()
        if early:
            self.early.clear()
            best = None
            for bid in early:
                if time_ms <= bid[1] <= expires_ms and _better(bid, best):
                    best = bid
            if best is not None:
                self.best.update(best)
        ctx.timers.register_event_time(_closing_time(expires_ms))
        return None

    def process_element2(self, value: Any, ctx: ProcessContext) -> Iterable[Any] | None:
        _auction, bidder, price, time_ms = value
        bid = (price, time_ms, bidder)
        auction = self.auction.value()
        if auction is None:
            self.early.add(bid)
            ctx.timers.register_event_time((time_ms + 1) / 1000)
        elif auction[2] <= time_ms <= auction[3] and _better(bid, self.best.value()):
            self.best.update(bid)
        return None

    def on_timer(self, timestamp: float, ctx: ProcessContext) -> Iterable[Any] | None:
        auction = self.auction.value()
        if auction is not None:
            seller, category, _start, expires_ms = auction
            if timestamp != _closing_time(expires_ms):
                return None  # an early bid's timer: the auction took its bids already
            best = self.best.value()
            self.auction.clear()
            self.best.clear()
            if best is None:
                return None
            price, bid_ms, bidder = best
            return ((ctx.key, seller, category, expires_ms, bidder, price, bid_ms),)
        # no auction yet: the bids the watermark has passed can never count
        early = [b for b in self.early.get() if (b[1] + 1) / 1000 > timestamp]
        if early:
            self.early.update(early)
        else:
            self.early.clear()
        return None


def winning_bids(events: DataStream, prefix: str = "q9") -> DataStream:
    """The Nexmark events with watermarks → one winning bid per auction (see the module docstring)."""
    auction_side = events.map_batches(auction_rows, name=f"{prefix}-auctions").key_by("id")
    bid_side = events.map_batches(best_bid_rows, name=f"{prefix}-bids").key_by("auction")
    return auction_side.connect(bid_side).process(WinningBids(), name=f"{prefix}-winning-bids").uid(
        f"{prefix}-winning-bids")


def query(events: DataStream) -> DataStream:
    """The Nexmark events with watermarks → `(auction, seller, category, expires_ms, bidder,
    price, bid_ms)` per auction with a winning bid."""
    return winning_bids(events)


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import harness

    harness.main(query, NAME, DESCRIPTION, columns=COLUMNS)
