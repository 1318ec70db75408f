"""Nexmark q11, user sessions: how many bids each bidder made in each session of activity.

The Nexmark project's q11 groups each bidder's bids into event-time session windows with a
10 s gap and emits `(bidder, bid_count, starttime, endtime)` per session, `endtime` being the
last bid's time plus the gap (SESSION_END). A session ends when the watermark passes its end.

Columnar: end to end. The bid selection is one `map_batches` per batch, and the session count
is the window operator's session table (each batch's runs per bidder are cut, counted and merged
into the stored sessions in numpy; a watermark emits every ended session of every bidder at
once: docs/concepts/time.md, "Sessions on the columnar path").

    python examples/nexmark/q11.py [--events N] [--parallelism P] [--rate EVENTS_PER_SECOND]
"""

from __future__ import annotations

import os
import sys

import pyarrow as pa

from epochal import DataStream
from epochal.connectors.nexmark import EventKind, bids
from epochal.connectors.nexmark.flat import flat_columns
from epochal.windows import Session

NAME = "q11"
DESCRIPTION = "user sessions: bids per bidder per session (10 s gap)"
# What it reads of Parquet files: as Spark, only the columns it uses.
READS = flat_columns({EventKind.BID: ["bidder"]})
GAP = Session(gap=10.0)


def bidders(events: pa.RecordBatch) -> pa.RecordBatch:
    """A batch of events → its bids' bidder and event time."""
    return bids(events).select(["bidder", "dateTime"])


def query(events: DataStream) -> DataStream:
    """The Nexmark events with watermarks → `(bidder, window_start, window_end, count)` per
    session (window bounds in seconds since the epoch)."""
    return (events.map_batches(bidders, name="q11-bids")
            .key_by("bidder")
            .window(GAP)
            .count(name="q11-sessions"))


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import harness

    harness.main(query, NAME, DESCRIPTION)
