"""Nexmark q0, pass-through: every bid, unchanged.

The Nexmark project's q0 (the one its published Flink figures measure) selects every bid's
auction, bidder, price, dateTime and extra. It measures the source, the framework and the sink,
with no work of the query's own: the ceiling of every other query.

Columnar: the whole query is one `map_batches` call per batch (a vectorized filter on `kind`,
then a selection of columns).

    python examples/nexmark/q0.py [--events N] [--parallelism P] [--rate EVENTS_PER_SECOND]
"""

from __future__ import annotations

import os
import sys

import pyarrow as pa

from epochal import DataStream
from epochal.connectors.nexmark import EventKind, bids
from epochal.connectors.nexmark.flat import flat_columns

NAME = "q0"
DESCRIPTION = "pass-through: every bid, unchanged"
COLUMNS = ["auction", "bidder", "price", "dateTime", "extra"]
# What it reads of Parquet files: as Spark, only the columns it uses.
READS = flat_columns({EventKind.BID: COLUMNS})


def q0(events: pa.RecordBatch) -> pa.RecordBatch:
    """A batch of Nexmark events → its bids' columns."""
    return bids(events).select(COLUMNS)


def query(events: DataStream) -> DataStream:
    """The Nexmark events with watermarks → q0's results."""
    return events.map_batches(q0, name=NAME)


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import harness

    harness.main(query, NAME, DESCRIPTION)
