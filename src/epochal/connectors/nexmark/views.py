"""The Nexmark events as SQL views: `bid`, `auction` and `person` (one per event kind), each with
its kind's schema and event time `dateTime`, so the Nexmark queries run as the SQL that defines
them (`env.sql`, examples/nexmark/sql/)."""

from __future__ import annotations

from collections.abc import Sequence

from ...api.environment import StreamEnvironment
from ...api.stream import DataStream
from .schema import AUCTION_SCHEMA, BID_SCHEMA, PERSON_SCHEMA, auctions, bids, persons

_KINDS = {"bid": (bids, BID_SCHEMA), "auction": (auctions, AUCTION_SCHEMA), "person": (persons, PERSON_SCHEMA)}


def create_views(
    events: DataStream, kinds: Sequence[str] = ("bid", "auction", "person")
) -> StreamEnvironment:
    """Register views `kinds` of the Nexmark stream `events` (with its watermarks on `dateTime`,
    which the views keep) in the stream's environment, and return that environment (to run
    `env.sql(...)` on)."""
    env = events._env
    for kind in kinds:
        select, schema = _KINDS[kind]
        stream = events.map_batches(select, name=f"nexmark-{kind}s")
        env.create_view(kind, stream, schema=schema, event_time="dateTime")
    return env
