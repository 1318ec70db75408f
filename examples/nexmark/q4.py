"""Nexmark q4, average closing price per category.

The Nexmark project's q4 joins each auction with its bids made within its lifetime
(`auction.dateTime <= bid.dateTime <= auction.expires`, both ends included), takes the highest
price per auction (the winning bid; auctions without such a bid drop out of the inner join),
and averages those prices per category, as a running aggregate: every closing auction updates
its category's average. (Beam's Query4 also requires the reserve price and averages over
sliding windows; this follows the SQL.)

- The winning bids are q9's (`q9.winning_bids`): auctions and bids connected into one keyed
  operator by auction id, each auction closed by an event-time timer after it expires.
- `CategoryAverage`, keyed by category: the sum and count of closing prices, emitting
  `(category, average, auctions)` per closed auction (the SQL's upsert stream, with the count).

Columnar: as q9's; the average is per record on the closed auctions.

    python examples/nexmark/q4.py [--events N] [--parallelism P] [--rate EVENTS_PER_SECOND]
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable
from typing import Any

from epochal import DataStream, KeyedProcessFunction, ProcessContext

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)
import harness  # noqa: E402 - examples/nexmark, just put on the path

q9 = harness.sibling("q9")

NAME = "q4"
DESCRIPTION = "average closing price per category (auctions joined with their bids)"
COLUMNS = ("category", "average", "auctions")  # of each result tuple, for the printed summary


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


def category_and_price(winner: tuple[Any, ...]) -> tuple[int, int]:
    """q9's winning bid → `(category, price)`."""
    return (winner[2], winner[5])


def category_of(closed: tuple[int, int]) -> int:
    """The key of a closed auction: its category."""
    return closed[0]


def query(events: DataStream) -> DataStream:
    """The Nexmark events with watermarks → `(category, average, auctions)` per closed auction."""
    return (q9.winning_bids(events, prefix="q4")
            .map(category_and_price, name="q4-prices")
            .key_by(category_of)
            .process(CategoryAverage(), name="q4-average").uid("q4-average"))


if __name__ == "__main__":
    harness.main(query, NAME, DESCRIPTION, columns=COLUMNS)
