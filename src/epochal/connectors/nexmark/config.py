"""The generator's parameters, with the defaults of Beam's Nexmark (`NexmarkConfiguration`).

Two kinds of numbers live here. `NexmarkConfig` holds what Beam lets a run change (hot ratios,
sizes, how many auctions are in flight, the event rate); the module constants are what Beam
fixes in its model generators (the 1 : 3 : 46 proportions, the first ids, the batches hot keys
are chosen from). `EventClock` turns an event id into its event time: a pure function of the id,
so event time does not depend on how fast the job runs.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...validation import check_int

# Events come in epochs of 50 ids: id % 50 == 0 is a person, 1..3 auctions, 4..49 bids.
PERSON_PROPORTION = 1
AUCTION_PROPORTION = 3
BID_PROPORTION = 46
PROPORTION_DENOMINATOR = PERSON_PROPORTION + AUCTION_PROPORTION + BID_PROPORTION

# Ids start above zero so that even small runs find matches (Beam's choice).
FIRST_PERSON_ID = 1000
FIRST_AUCTION_ID = 1000
FIRST_CATEGORY_ID = 10
NUM_CATEGORIES = 5

# Random persons and auctions may be up to this many ids ahead of the last one generated, so a
# bid or an auction can name a person or auction that appears a little later (out of order).
ID_LEAD = 10

# A hot seller, auction or bidder is the first (bidder: second) of the last batch of this many.
HOT_BATCH = 100

# Bid channels (the Nexmark project's extension of Beam's bid): half of the bids come from one
# of four hot channels, the others from one of 10,000 numbered channels.
HOT_CHANNELS = ("Google", "Facebook", "Baidu", "Apple")
HOT_CHANNELS_RATIO = 2
CHANNELS_NUMBER = 10_000

# Beam's default event rate (`firstEventRate`), events per second of event time.
DEFAULT_EVENT_RATE = 10_000

# 2015-07-15T00:00:00Z: a fixed first event time, so that two runs see the same event times.
DEFAULT_BASE_TIME_MS = 1_436_918_400_000


@dataclass(frozen=True, slots=True)
class NexmarkConfig:
    """What shapes the generated events; the defaults are Beam's.

    Args:
        hot_auction_ratio: a bid is for the hot auction with probability 1 - 1/ratio.
        hot_sellers_ratio: an auction is by the hot seller with probability 1 - 1/ratio.
        hot_bidders_ratio: a bid is by the hot bidder with probability 1 - 1/ratio.
        num_in_flight_auctions: how many recent auctions a random bid may be for; also sets
            the mean auction length (the event time in which that many auctions are created).
        num_active_people: how many recent persons a random seller or bidder is chosen from.
        avg_person_byte_size: the mean size of a person, reached by padding `extra`.
        avg_auction_byte_size: the mean size of an auction, likewise.
        avg_bid_byte_size: the mean size of a bid, likewise.
        event_rate: events per second of *event time*: event `i` happens at
            `base_time_ms + i * 1000 // event_rate`. `None`: the source's `events_per_second`
            if it is paced (event time then keeps up with the wall clock, as in Beam's
            rate-limited mode), otherwise Beam's 10,000 events/s.
        base_time_ms: the event time of event 0, in milliseconds since the epoch.
    """

    hot_auction_ratio: int = 2
    hot_sellers_ratio: int = 4
    hot_bidders_ratio: int = 4
    num_in_flight_auctions: int = 100
    num_active_people: int = 1000
    avg_person_byte_size: int = 200
    avg_auction_byte_size: int = 500
    avg_bid_byte_size: int = 100
    event_rate: int | None = None
    base_time_ms: int = DEFAULT_BASE_TIME_MS

    def __post_init__(self) -> None:
        for name in ("hot_auction_ratio", "hot_sellers_ratio", "hot_bidders_ratio", "num_in_flight_auctions",
                     "num_active_people"):
            check_int(name, getattr(self, name))
        for name in ("avg_person_byte_size", "avg_auction_byte_size", "avg_bid_byte_size"):
            check_int(name, getattr(self, name), minimum=0, maximum=1 << 20)
        if self.event_rate is not None:
            check_int("event_rate", self.event_rate)
        check_int("base_time_ms", self.base_time_ms, minimum=0)


@dataclass(frozen=True, slots=True)
class EventClock:
    """Event time as a function of the event id (Beam's fixed-rate timeline).

    Event `i` happens at `base_time_ms + i * 1000 // rate` milliseconds: integer arithmetic,
    so the same id has the same time on every machine and in every run.
    """

    base_time_ms: int
    rate: int  # events per second of event time

    def times_ms(self, ids: np.ndarray) -> np.ndarray:
        """The event times, int64 milliseconds since the epoch, of an int64 array of ids."""
        return self.base_time_ms + ids * 1000 // self.rate

    def time_ms(self, event_id: int) -> int:
        return self.base_time_ms + event_id * 1000 // self.rate


def event_clock(config: NexmarkConfig, events_per_second: int | None) -> EventClock:
    """The clock a source with this config and pacing uses (see `NexmarkConfig.event_rate`)."""
    if config.event_rate is not None:
        rate = config.event_rate
    else:
        rate = events_per_second if events_per_second is not None else DEFAULT_EVENT_RATE
    return EventClock(config.base_time_ms, rate)
