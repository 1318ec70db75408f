"""Nexmark q8, new users: persons who created an auction in the tumbling 10 s window in which
they registered.

The Nexmark project's q8 joins the persons of each 10 s tumbling window (aligned to the epoch)
with the distinct sellers of auctions in the same window, on `person.id = seller`, and emits
`(id, name, starttime)`: one row per such person and window. The original query used 12 hours.

It is a window join (`persons.join(sellers).where("id").equal_to("seller").window(Tumbling(10))`)
of the semi kind (`how="semi"`): each person with at least one auction of theirs in the window,
once. The join keeps each side's records once per slice of the windows (here a tumbling window is
its own slice), in keyed state by person id; when the watermark passes a window's end it emits
its persons that met a seller, and drops the window.

Columnar: one `map_batches` per side selects persons, and auctions reduced to distinct
(seller, window) pairs (the hot seller makes three auctions in four); keys and event times are
read from the Arrow columns in one pass per batch; the join is per record on what is left.

    python examples/nexmark/q8.py [--events N] [--parallelism P] [--rate EVENTS_PER_SECOND]
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable
from typing import Any

import numpy as np
import pyarrow as pa

from epochal import DataStream, ProcessJoinFunction
from epochal.connectors.nexmark import EventKind, auctions, persons
from epochal.connectors.nexmark.flat import flat_columns
from epochal.connectors.nexmark.schema import TIMESTAMP
from epochal.windows import Tumbling

NAME = "q8"
DESCRIPTION = "new users: persons with an auction in the 10 s tumbling window they registered in"
# What it reads of Parquet files: as Spark, only the columns it uses.
READS = flat_columns({EventKind.PERSON: ["id", "name"], EventKind.AUCTION: ["seller"]})
WINDOW_MS = 10_000


def person_rows(events: pa.RecordBatch) -> pa.RecordBatch:
    """A batch of events → its persons: `(id, name, dateTime)`."""
    return persons(events).select(["id", "name", "dateTime"])


def seller_rows(events: pa.RecordBatch) -> pa.RecordBatch:
    """A batch of events → its distinct (seller, window): `(seller, dateTime)`, the time of the
    seller's first auction of the window in the batch."""
    auction = auctions(events)
    ms = auction.column("dateTime").cast(pa.int64()).to_numpy()
    sellers = auction.column("seller").to_numpy()
    _, first = np.unique(np.stack([sellers, ms - ms % WINDOW_MS]), axis=1, return_index=True)
    first.sort()
    return pa.RecordBatch.from_arrays(
        [pa.array(sellers[first]), auction.column("dateTime").take(pa.array(first))], names=["seller", "dateTime"],
    )


class NewUser(ProcessJoinFunction):
    """A person that met a seller (itself) in a window: `(id, name, window start ms)`."""

    def process_element(self, left: Any, right: Any, ctx: Any) -> Iterable[Any]:
        person_id, name, _registered = left
        yield (person_id, name, round(ctx.window[0] * 1000))


def as_start_time(rows: pa.RecordBatch) -> pa.RecordBatch:
    """`(id, name, window ms)` rows → `(id, name, starttime)` with a timestamp column."""
    return pa.RecordBatch.from_arrays(
        [rows.column(0), rows.column(1), rows.column(2).cast(pa.int64()).cast(TIMESTAMP)],
        names=["id", "name", "starttime"],
    )


def query(events: DataStream) -> DataStream:
    """The Nexmark events with watermarks → `(id, name, starttime)` per new user and window."""
    people = events.map_batches(person_rows, name="q8-persons")
    sellers = events.map_batches(seller_rows, name="q8-sellers")
    return (people.join(sellers).where("id").equal_to("seller").window(Tumbling(WINDOW_MS / 1000))
            .process(NewUser(), how="semi", name="q8-join").uid("q8-join")
            .map_batches(as_start_time, name="q8-output"))


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import harness

    harness.main(query, NAME, DESCRIPTION)
