"""Nexmark q6, average selling price by seller: the average of each seller's last 10 closed
auctions, updated as each of their auctions closes.

The Nexmark project's q6 takes each auction's winning price (q9's join of auctions with the bids
in their lifetime) and averages, per seller, the prices of their 10 most recent closed auctions
(`AVG(final) OVER (PARTITION BY seller ORDER BY dateTime ROWS BETWEEN 10 PRECEDING AND CURRENT
ROW)`, in Beam's Query6: the last 10). "Most recent" is by closing time: an auction closes when
the watermark passes its `expires`.

- The winning bids are q9's (`q9.winning_bids`), keyed by seller.
- `SellerAverage`, per seller: the winning bids come from several subtasks of the join, in no set
  order between them; each waits in keyed state for an event-time timer at its auction's closing
  time, which fires once every auction of the seller closing until then has arrived (the join
  emits a winner before it forwards the watermark that closed it). Then they are ranked by
  (closing time, auction id), the last 10 prices kept, and `(seller, auction, average)` emitted
  per closed auction: the same output, whatever the interleaving.

Columnar: as q9's; the ranking and the average are per record on the closed auctions.

    python examples/nexmark/q6.py [--events N] [--parallelism P] [--rate EVENTS_PER_SECOND]
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

NAME = "q6"
DESCRIPTION = "average selling price by seller (their last 10 closed auctions)"
COLUMNS = ("seller", "auction", "average")  # of each result tuple, for the printed summary
LAST = 10


def seller_of(winner: tuple[Any, ...]) -> int:
    """The key of a winning bid: its auction's seller."""
    return winner[1]


def closing_time(expires_ms: int) -> float:
    """When an auction closes, in seconds: 1 ms after it expires (q9's timer)."""
    return (expires_ms + 1) / 1000


class SellerAverage(KeyedProcessFunction):
    """Per seller: winning bids waiting for their closing time, and the last `LAST` prices."""

    def open(self, ctx: ProcessContext) -> None:
        self.waiting = ctx.map_state("waiting")  # closing time -> [(auction, price)]
        self.last = ctx.value_state("last", default=())

    def process_element(self, value: Any, ctx: ProcessContext) -> Iterable[Any] | None:
        auction, _seller, _category, expires_ms, _bidder, price, _bid_ms = value
        at = closing_time(expires_ms)
        self.waiting.put(at, [*(self.waiting.get(at) or []), (auction, price)])
        ctx.timers.register_event_time(at)
        return None

    def on_timer(self, timestamp: float, ctx: ProcessContext) -> Iterable[Any] | None:
        out = []
        last = tuple(self.last.value() or ())
        for at in sorted(t for t in self.waiting.keys() if t <= timestamp):
            for auction, price in sorted(self.waiting.get(at) or []):
                last = (*last, price)[-LAST:]
                out.append((ctx.key, auction, sum(last) / len(last)))
            self.waiting.remove(at)
        self.last.update(last)
        return out


def query(events: DataStream) -> DataStream:
    """The Nexmark events with watermarks → `(seller, auction, average)` per closed auction."""
    return (q9.winning_bids(events, prefix="q6")
            .key_by(seller_of)
            .process(SellerAverage(), name="q6-average").uid("q6-average"))


if __name__ == "__main__":
    harness.main(query, NAME, DESCRIPTION, columns=COLUMNS)
