"""Nexmark q12, processing-time windows: how many bids each bidder makes per 10 s of the
job's clock.

The Nexmark project's q12 counts bids per bidder in tumbling 10 s windows of processing time
(`PROCTIME()`), emitting `(bidder, bid_count, starttime, endtime)`. Here processing time is a
column: `stamp_processing_time` writes the wall clock (`p_time`) into each batch of bids as it
passes, and `assign_timestamps` makes that column the event time of what follows, with
watermarks that follow the clock (1 s behind it, so that a wall clock stepped back a little
does not make bids late). The windows are then
the ordinary event-time tumbling windows on it. The one difference from a processing-time
timer: a window fires when a later batch (or the end of the input) moves the watermark past
its end, not on the clock alone, so an input that stalls holds its last window back.

The results depend on the job's speed, so they cannot be compared with a batch reference
exactly; per bidder, the counts over all windows add up to the bidder's bids.

Columnar: end to end (the stamp is one `map_batches`; the count, the window operator's Arrow
path).

    python examples/nexmark/q12.py [--events N] [--parallelism P] [--rate EVENTS_PER_SECOND]
"""

from __future__ import annotations

import os
import sys
import time

import pyarrow as pa

from epochal import DataStream, WatermarkStrategy
from epochal.connectors.nexmark import bids
from epochal.windows import Tumbling

NAME = "q12"
DESCRIPTION = "processing-time windows: bids per bidder per 10 s of wall time"
WINDOW = Tumbling(size=10.0)
PROCESSING_TIME = WatermarkStrategy.bounded_out_of_orderness(1.0, timestamp="p_time")


def stamp_processing_time(events: pa.RecordBatch) -> pa.RecordBatch:
    """A batch of events → its bids' bidder, stamped with the wall clock now (`p_time`)."""
    bidder = bids(events).column("bidder")
    now = pa.scalar(time.time_ns() // 1_000_000, pa.int64()).cast(pa.timestamp("ms", tz="UTC"))
    return pa.RecordBatch.from_arrays([bidder, pa.repeat(now, len(bidder))], names=["bidder", "p_time"])


def query(events: DataStream) -> DataStream:
    """The Nexmark events → `(bidder, window_start, window_end, count)` per window of the clock
    (window bounds in seconds since the epoch)."""
    return (events.map_batches(stamp_processing_time, name="q12-stamp")
            .assign_timestamps(PROCESSING_TIME, name="q12-processing-time")
            .key_by("bidder")
            .window(WINDOW)
            .count(name="q12-windows"))


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import harness

    harness.main(query, NAME, DESCRIPTION)
