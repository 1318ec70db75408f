"""Nexmark q1, currency conversion: every bid with its price in euros.

The Nexmark project's q1 (the one its published Flink figures measure) multiplies every bid's
price by 0.908. Beam's Query1 converts with `price * 89 / 100` in integer cents; this follows
the Nexmark project, as the benchmark compares with its figures. The euro price comes out as
float64 (Flink SQL gives DECIMAL(23, 3)).

Columnar: one `map_batches` call per batch (a vectorized filter on `kind`, then one
pyarrow.compute multiplication over the whole batch).

    python examples/nexmark/q1.py [--events N] [--parallelism P] [--rate EVENTS_PER_SECOND]
"""

from __future__ import annotations

import os
import sys

import pyarrow as pa
import pyarrow.compute as pc

from epochal import DataStream
from epochal.connectors.nexmark import EventKind, bids
from epochal.connectors.nexmark.flat import flat_columns

NAME = "q1"
DESCRIPTION = "currency conversion: every bid, priced in euros"
# What it reads of Parquet files: as Spark, only the columns it uses.
READS = flat_columns({EventKind.BID: ["auction", "bidder", "price", "dateTime", "extra"]})
DOLLARS_TO_EUROS = 0.908


def q1(events: pa.RecordBatch) -> pa.RecordBatch:
    """A batch of Nexmark events → its bids, priced in euros."""
    bid = bids(events)
    return pa.RecordBatch.from_arrays(
        [bid["auction"], bid["bidder"], pc.multiply(bid["price"], DOLLARS_TO_EUROS), bid["dateTime"], bid["extra"]],
        names=["auction", "bidder", "price", "dateTime", "extra"],
    )


def query(events: DataStream) -> DataStream:
    """The Nexmark events with watermarks → q1's results."""
    return events.map_batches(q1, name=NAME)


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import harness

    harness.main(query, NAME, DESCRIPTION)
