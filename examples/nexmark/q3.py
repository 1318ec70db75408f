"""Nexmark q3, local item suggestion: who sells in Oregon, Idaho or California in category 10,
and which auctions.

The Nexmark project's q3 is an inner join of auctions and persons on `seller = id`, keeping
auctions of category 10 by persons whose state is OR, ID or CA, and emitting the person's name,
city and state with the auction's id. It has no window: the join is incremental, as in Beam's
Query3: the local persons and the category-10 auctions are two streams connected into one
keyed operator (`connect`), keyed by person id on one side and by seller on the other, with a
`KeyedCoProcessFunction` holding both sides in keyed state:

- a local person is kept for good (the SQL join matches every later auction of theirs);
- an auction whose seller has not been seen yet waits `AUCTION_WAIT_MS` of event time for them
  (an event-time timer then drops it: its seller is not local, or never comes). The generator
  names a seller at most 10 persons (550 events) ahead of the last person created, 55 ms of
  event time at Beam's 10,000 events/s, so the wait loses nothing down to ~55 events/s.

Columnar: each side's selection (kinds, states, category) is one vectorized `map_batches` per
batch and leaves about 1 event in 80; the join runs per record on those.

    python examples/nexmark/q3.py [--events N] [--parallelism P] [--rate EVENTS_PER_SECOND]
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from epochal import DataStream, KeyedCoProcessFunction, ProcessContext
from epochal.connectors.nexmark import EventKind, auctions, persons
from epochal.connectors.nexmark.flat import flat_columns

NAME = "q3"
DESCRIPTION = "local item suggestion: auctions of category 10 by sellers in OR, ID or CA"
# What it reads of Parquet files: as Spark, only the columns it uses.
READS = flat_columns({EventKind.PERSON: ["id", "name", "city", "state"],
                      EventKind.AUCTION: ["seller", "id", "category"]})
COLUMNS = ("name", "city", "state", "auction")  # of each result tuple, for the printed summary
LOCAL_STATES = pa.array(["OR", "ID", "CA"])
CATEGORY = 10
AUCTION_WAIT_MS = 10_000  # how long an auction waits for its seller, in event time


def local_persons(events: pa.RecordBatch) -> pa.RecordBatch:
    """A batch of events → its persons in OR, ID or CA: `(id, name, city, state)`."""
    person = persons(events)
    person = person.filter(pc.is_in(person.column("state"), value_set=LOCAL_STATES))
    return person.select(["id", "name", "city", "state"])


def category_auctions(events: pa.RecordBatch) -> pa.RecordBatch:
    """A batch of events → its auctions of category 10: `(seller, id, time_ms)`."""
    auction = auctions(events)
    auction = auction.filter(pc.equal(auction.column("category"), CATEGORY))
    return pa.RecordBatch.from_arrays(
        [auction.column("seller"), auction.column("id"), auction.column("dateTime").cast(pa.int64())],
        names=["seller", "id", "time_ms"],
    )


class LocalItemJoin(KeyedCoProcessFunction):
    """Per person id: the local person (name, city, state), and auctions waiting for them."""

    def open(self, ctx: ProcessContext) -> None:
        self.person = ctx.value_state("person")
        self.waiting = ctx.list_state("waiting")  # (auction id, event time ms)

    def process_element1(self, value: Any, ctx: ProcessContext) -> Iterable[Any] | None:
        _id, name, city, state = value  # a local person
        self.person.update((name, city, state))
        waiting = self.waiting.get()
        if not waiting:
            return None
        self.waiting.clear()
        return [(name, city, state, auction) for auction, _ in waiting]

    def process_element2(self, value: Any, ctx: ProcessContext) -> Iterable[Any] | None:
        _seller, auction, time_ms = value  # a category-10 auction
        person = self.person.value()
        if person is not None:
            return ((*person, auction),)
        self.waiting.add((auction, time_ms))
        ctx.timers.register_event_time((time_ms + AUCTION_WAIT_MS) / 1000)
        return None

    def on_timer(self, timestamp: float, ctx: ProcessContext) -> Iterable[Any] | None:
        waiting = [(a, t) for a, t in self.waiting.get() if (t + AUCTION_WAIT_MS) / 1000 > timestamp]
        if waiting:
            self.waiting.update(waiting)
        else:
            self.waiting.clear()
        return None


def query(events: DataStream) -> DataStream:
    """The Nexmark events with watermarks → (name, city, state, auction id) per match."""
    sellers = events.map_batches(local_persons, name="q3-persons").key_by("id")
    items = events.map_batches(category_auctions, name="q3-auctions").key_by("seller")
    return sellers.connect(items).process(LocalItemJoin(), name="q3-join").uid("q3-join")


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import harness

    harness.main(query, NAME, DESCRIPTION, columns=COLUMNS)
