"""The Arrow schema of Nexmark events, and per-kind views of a batch of them.

One stream, not three: a batch holds persons, auctions and bids in event-id order, with a
`kind` column and one struct column per kind (`person`, `auction`, `bid`), null on the rows of
the other kinds. This is the layout of the Nexmark project's own generator table (an event
type and three nullable rows), and it keeps what the queries joining kinds need: one event-id
order and one event-time line across kinds, one watermark per split for all of them (q3 and q8
join persons with auctions; three sources would each have their own splits, positions and
watermarks, and their relative order would depend on scheduling). Each struct keeps its kind's
Nexmark field names unchanged (`id` is a person's or an auction's id, with no renaming), and a
query takes its kind with `bids(batch)` (a filter on `kind`, vectorized).

Times are Arrow `timestamp[ms, UTC]`: the millisecond integers of Nexmark's `TIMESTAMP(3)`, exact
(no float rounding of window bounds) and read as event time by `WatermarkStrategy` like any
Arrow timestamp. The top-level `dateTime` is the event time of every row, whatever its kind.
"""

from __future__ import annotations

from enum import IntEnum

import pyarrow as pa
import pyarrow.compute as pc


class EventKind(IntEnum):
    """The `kind` column's values (Nexmark's event types)."""

    PERSON = 0
    AUCTION = 1
    BID = 2


TIMESTAMP = pa.timestamp("ms", tz="UTC")
# Bid channels and URLs repeat (10,004 distinct channels): dictionary-encoded, the batch refers
# to one shared dictionary instead of copying the strings into every batch.
CHANNEL = pa.dictionary(pa.int16(), pa.string())

PERSON_SCHEMA = pa.schema([
    ("id", pa.int64()),
    ("name", pa.string()),
    ("emailAddress", pa.string()),
    ("creditCard", pa.string()),
    ("city", pa.string()),
    ("state", pa.string()),
    ("dateTime", TIMESTAMP),
    ("extra", pa.string()),
])

AUCTION_SCHEMA = pa.schema([
    ("id", pa.int64()),
    ("itemName", pa.string()),
    ("description", pa.string()),
    ("initialBid", pa.int64()),
    ("reserve", pa.int64()),
    ("dateTime", TIMESTAMP),
    ("expires", TIMESTAMP),
    ("seller", pa.int64()),
    ("category", pa.int64()),
    ("extra", pa.string()),
])

BID_SCHEMA = pa.schema([
    ("auction", pa.int64()),
    ("bidder", pa.int64()),
    ("price", pa.int64()),
    ("channel", CHANNEL),
    ("url", CHANNEL),
    ("dateTime", TIMESTAMP),
    ("extra", pa.string()),
])

KIND_SCHEMAS: dict[EventKind, pa.Schema] = {
    EventKind.PERSON: PERSON_SCHEMA,
    EventKind.AUCTION: AUCTION_SCHEMA,
    EventKind.BID: BID_SCHEMA,
}
KIND_COLUMNS: dict[EventKind, str] = {EventKind.PERSON: "person", EventKind.AUCTION: "auction", EventKind.BID: "bid"}

EVENT_SCHEMA = pa.schema([
    ("kind", pa.int8()),
    ("dateTime", TIMESTAMP),
    ("person", pa.struct(list(PERSON_SCHEMA))),
    ("auction", pa.struct(list(AUCTION_SCHEMA))),
    ("bid", pa.struct(list(BID_SCHEMA))),
])


def _of_kind(batch: pa.RecordBatch, kind: EventKind) -> pa.RecordBatch:
    column = batch.column(KIND_COLUMNS[kind])
    rows = column.filter(pc.equal(batch.column("kind"), pa.scalar(int(kind), pa.int8())))
    return pa.RecordBatch.from_struct_array(rows)


def persons(batch: pa.RecordBatch) -> pa.RecordBatch:
    """The persons of a batch of events, as a batch with `PERSON_SCHEMA`."""
    return _of_kind(batch, EventKind.PERSON)


def auctions(batch: pa.RecordBatch) -> pa.RecordBatch:
    """The auctions of a batch of events, as a batch with `AUCTION_SCHEMA`."""
    return _of_kind(batch, EventKind.AUCTION)


def bids(batch: pa.RecordBatch) -> pa.RecordBatch:
    """The bids of a batch of events, as a batch with `BID_SCHEMA`."""
    return _of_kind(batch, EventKind.BID)
