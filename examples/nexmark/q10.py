"""Nexmark q10, log to the file system: every bid, written to Parquet files partitioned by time.

The Nexmark project's q10 writes every bid with two more columns, the day `dt` ('yyyy-MM-dd')
and the minute `hm` ('HH:mm') of its event time, to a file system sink partitioned by
`(dt, hm)`. Here the sink is `ParquetSink(partition_by=("dt", "hm"))`: Hive-style directories
(`dt=2015-07-15/hm=00%3A00/`, a `:` escaped as Spark escapes it) with files committed exactly
once per checkpoint, listed in Spark's `_spark_metadata` log, so `spark.read.parquet(path)`
reads exactly the committed bids, with `dt` and `hm` back as columns.

`query` adds the columns only (as every query, it builds no sink); the sink is `sink(path)`,
which the command line uses (`--out`, default a new temporary directory).

Columnar: end to end (one `map_batches`; the partitioning splits each batch with a group-by).

    python examples/nexmark/q10.py [--events N] [--parallelism P] [--out DIRECTORY]
"""

from __future__ import annotations

import os
import sys

import pyarrow as pa
import pyarrow.compute as pc

from epochal import DataStream
from epochal.connectors import ParquetSink
from epochal.connectors.nexmark import bids

NAME = "q10"
DESCRIPTION = "log to the file system: every bid, partitioned by day and minute"


def log_rows(events: pa.RecordBatch) -> pa.RecordBatch:
    """A batch of events → its bids: `(auction, bidder, price, dateTime, extra, dt, hm)`."""
    bid = bids(events)
    time = bid.column("dateTime")
    return pa.RecordBatch.from_arrays(
        [bid.column("auction"), bid.column("bidder"), bid.column("price"), time, bid.column("extra"),
         pc.strftime(time, format="%Y-%m-%d"), pc.strftime(time, format="%H:%M")],
        names=["auction", "bidder", "price", "dateTime", "extra", "dt", "hm"],
    )


def query(events: DataStream) -> DataStream:
    """The Nexmark events with watermarks → every bid with its `dt` and `hm`."""
    return events.map_batches(log_rows, name="q10-log")


def sink(path: str) -> ParquetSink:
    """Where q10 writes: Parquet under `path`, partitioned by day and minute."""
    return ParquetSink(path, partition_by=("dt", "hm"), mode="overwrite")


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import harness

    harness.main(query, NAME, DESCRIPTION, sink=sink)
