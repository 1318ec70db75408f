"""Nexmark: the auction-site benchmark's event generator as a replayable source.

`NexmarkSource` emits persons, auctions and bids as one stream of Arrow batches
(`EVENT_SCHEMA`); `persons`, `auctions` and `bids` select one kind of a batch. Modules, one job
each: `config` (parameters, Beam's defaults, event time of an id), `counter_random` (draws
that are pure functions of (seed, id, field)), `columns` (Arrow columns without Python objects
per value), `generator` (events of any ids), `order` (bounded out-of-orderness), `schema`,
`source` (splits, positions, pacing).
"""

from .config import NexmarkConfig as NexmarkConfig
from .generator import NexmarkGenerator as NexmarkGenerator
from .schema import AUCTION_SCHEMA as AUCTION_SCHEMA
from .schema import BID_SCHEMA as BID_SCHEMA
from .schema import EVENT_SCHEMA as EVENT_SCHEMA
from .schema import PERSON_SCHEMA as PERSON_SCHEMA
from .schema import EventKind as EventKind
from .schema import auctions as auctions
from .schema import bids as bids
from .schema import persons as persons
from .source import NexmarkSource as NexmarkSource
from .views import create_views as create_views

__all__ = [
    "AUCTION_SCHEMA",
    "BID_SCHEMA",
    "EVENT_SCHEMA",
    "PERSON_SCHEMA",
    "EventKind",
    "NexmarkConfig",
    "NexmarkGenerator",
    "create_views",
    "NexmarkSource",
    "auctions",
    "bids",
    "persons",
]
