"""Nexmark q8, new users: persons who created an auction in the tumbling 10 s window in which
they registered.

The Nexmark project's q8 joins the persons of each 10 s tumbling window (aligned to the epoch)
with the distinct sellers of auctions in the same window, on `person.id = seller`, and emits
`(id, name, starttime)`: one row per such person and window. The original query used 12 hours.

The stream is one source, so the window join is a keyed function over the union of both sides,
keyed by person id (a person's id, an auction's seller): `NewUsers` keeps, per person and
window, the person's name and whether an auction of theirs was seen; it emits the row as soon
as both are, once, and an event-time timer at the window's end drops the window's state.

Columnar: one `map_batches` per batch selects persons and auctions and reduces the auctions to
distinct (seller, window) pairs (the hot seller makes three auctions in four); `NewUsers` is
per record on what is left.

    python examples/nexmark/q8.py [--events N] [--parallelism P] [--rate EVENTS_PER_SECOND]
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable
from typing import Any

import numpy as np
import pyarrow as pa

from epochal import DataStream, KeyedProcessFunction, ProcessContext
from epochal.connectors.nexmark import auctions, persons
from epochal.connectors.nexmark.schema import TIMESTAMP

NAME = "q8"
DESCRIPTION = "new users: persons with an auction in the 10 s tumbling window they registered in"
WINDOW_MS = 10_000

# The join's input: persons (their name) and auctions (name null), by person id and window.
JOIN_COLUMNS = ["person", "window_ms", "name"]


def persons_and_sellers(events: pa.RecordBatch) -> pa.RecordBatch:
    """A batch of events → its persons and its distinct (seller, window) pairs, as `JOIN_COLUMNS`."""
    person = persons(events)
    auction = auctions(events)
    p_ms = person.column("dateTime").cast(pa.int64()).to_numpy()
    a_ms = auction.column("dateTime").cast(pa.int64()).to_numpy()
    pairs = np.unique(np.stack([auction.column("seller").to_numpy(), a_ms - a_ms % WINDOW_MS]), axis=1)
    return pa.RecordBatch.from_arrays(
        [
            pa.concat_arrays([person.column("id"), pa.array(pairs[0])]),
            pa.array(np.concatenate([p_ms - p_ms % WINDOW_MS, pairs[1]])),
            pa.concat_arrays([person.column("name"), pa.nulls(pairs.shape[1], pa.string())]),
        ],
        names=JOIN_COLUMNS,
    )


class NewUsers(KeyedProcessFunction):
    """Per person: for each open window, `[name or None, auction seen, emitted]`."""

    def open(self, ctx: ProcessContext) -> None:
        self.windows = ctx.map_state("windows")

    def process_element(self, value: Any, ctx: ProcessContext) -> Iterable[Any] | None:
        person, window_ms, name = value
        seen = self.windows.get(window_ms)
        if seen is None:
            seen = [None, False, False]
            ctx.timers.register_event_time((window_ms + WINDOW_MS) / 1000)
        if name is None:
            seen[1] = True
        else:
            seen[0] = name
        out = None
        if seen[0] is not None and seen[1] and not seen[2]:
            seen[2] = True
            out = ((person, seen[0], window_ms),)
        self.windows.put(window_ms, seen)
        return out

    def on_timer(self, timestamp: float, ctx: ProcessContext) -> Iterable[Any] | None:
        for window_ms in [w for w in self.windows.keys() if (w + WINDOW_MS) / 1000 <= timestamp]:
            self.windows.remove(window_ms)
        return None


def as_start_time(rows: pa.RecordBatch) -> pa.RecordBatch:
    """`(id, name, window ms)` rows → `(id, name, starttime)` with a timestamp column."""
    return pa.RecordBatch.from_arrays(
        [rows.column(0), rows.column(1), rows.column(2).cast(pa.int64()).cast(TIMESTAMP)],
        names=["id", "name", "starttime"],
    )


def query(events: DataStream) -> DataStream:
    """The Nexmark events with watermarks → `(id, name, starttime)` per new user and window."""
    return (events.map_batches(persons_and_sellers, name="q8-select")
            .key_by("person")
            .process(NewUsers(), name="q8-join").uid("q8-join")
            .map_batches(as_start_time, name="q8-output"))


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import harness

    harness.main(query, NAME, DESCRIPTION)
