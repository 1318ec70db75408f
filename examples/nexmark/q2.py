"""Nexmark q2, selection: the bids on every 123rd auction, with their price.

Beam's Query2 and the Nexmark project's q2 agree: the (auction, price) of the bids whose
auction id is a multiple of 123 (`auctionSkip`). The original CQL query named five auction ids;
Beam widened it so that it selects bids at any stream length.

Columnar: one `map_batches` call per batch (the kind filter of the two fields it reads, then one
vectorized modulo, numpy on the column's buffer, and a filter). Read from Parquet, the job reads
only those fields' columns (`READS`), as Spark does for the same query.

    python examples/nexmark/q2.py [--events N] [--parallelism P] [--rate EVENTS_PER_SECOND]
"""

from __future__ import annotations

import os
import sys

import pyarrow as pa
import pyarrow.compute as pc

from epochal import DataStream
from epochal.connectors.nexmark import EventKind
from epochal.connectors.nexmark.flat import flat_columns

NAME = "q2"
DESCRIPTION = "selection: the bids on every 123rd auction, with their price"
AUCTION_SKIP = 123
READS = flat_columns({EventKind.BID: ["auction", "price"]})  # what it reads of Parquet files
_BID = pa.scalar(int(EventKind.BID), pa.int8())


def q2(events: pa.RecordBatch) -> pa.RecordBatch:
    """A batch of Nexmark events → (auction, price) of the bids on every 123rd auction."""
    bid, is_bid = events.column("bid"), pc.equal(events.column("kind"), _BID)
    auction, price = bid.field("auction").filter(is_bid), bid.field("price").filter(is_bid)
    chosen = pa.array(auction.to_numpy() % AUCTION_SKIP == 0)  # zero-copy: int64 without nulls
    return pa.RecordBatch.from_arrays([auction.filter(chosen), price.filter(chosen)], names=["auction", "price"])


def query(events: DataStream) -> DataStream:
    """The Nexmark events with watermarks → q2's results."""
    return events.map_batches(q2, name=NAME)


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import harness

    harness.main(query, NAME, DESCRIPTION)
