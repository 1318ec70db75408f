"""Nexmark events as a pure, vectorized function of their ids (Beam's semantics).

`NexmarkGenerator.events(ids)` builds the Arrow batch of any set of event ids, in any order, in
one vectorized pass per column: every random choice is a counter-based draw keyed by
(seed, event id, field) (`counter_random`), and every id relation is arithmetic on the id, as in
Beam's generator:

- the kind of event `i` is given by `i % 50`: 0 a person, 1..3 an auction, 4..49 a bid;
- the person created by event `i` has id `1000 + i // 50`, the auction `1000 + 3 * (i // 50) + k`;
- an auction's seller is the hot seller (the first of the last batch of 100 persons) with
  probability 1 - 1/hot_sellers_ratio, else one of the last `num_active_people` persons (or up
  to 10 not yet created);
- a bid's auction is the hot auction (the first of the last 100 auctions) with probability
  1 - 1/hot_auction_ratio, else one of the last `num_in_flight_auctions` (or up to 10 ahead);
  its bidder is the hot bidder (the second of the last 100 persons) with probability
  1 - 1/hot_bidders_ratio, else a random active person;
- prices are `round(100 * 10**(6u))` cents for a uniform u (1.00 to 1,000,000.00);
- an auction expires after a uniform time averaging the event time in which
  `num_in_flight_auctions` further auctions are created;
- `extra` pads each event to its kind's average byte size (plus or minus 20 %);
- a bid's channel is one of four hot channels with probability 1/2, else one of 10,000
  (the Nexmark project's extension); its URL is the channel's.

The draws are not Java's `Random`, so values differ from Beam's for the same event; the
distributions and the id relations are Beam's.
"""

from __future__ import annotations

import functools

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .columns import digit_groups, members_before, text_pool, widen
from .config import (
    AUCTION_PROPORTION,
    CHANNELS_NUMBER,
    FIRST_AUCTION_ID,
    FIRST_CATEGORY_ID,
    FIRST_PERSON_ID,
    HOT_BATCH,
    HOT_CHANNELS,
    HOT_CHANNELS_RATIO,
    ID_LEAD,
    NUM_CATEGORIES,
    PERSON_PROPORTION,
    PROPORTION_DENOMINATOR,
    EventClock,
    NexmarkConfig,
)
from .counter_random import EventDraws, below, high, low, stream_key, unit
from .schema import (
    AUCTION_SCHEMA,
    BID_SCHEMA,
    EVENT_SCHEMA,
    KIND_COLUMNS,
    PERSON_SCHEMA,
    TIMESTAMP,
    EventKind,
)

_US_STATES = ("AZ", "CA", "ID", "OR", "WA", "WY")
_US_CITIES = ("Phoenix", "Los Angeles", "San Francisco", "Boise", "Portland", "Bend", "Redmond", "Seattle",
              "Kent", "Cheyenne")
_FIRST_NAMES = ("Peter", "Paul", "Luke", "John", "Saul", "Vicky", "Kate", "Julie", "Sarah", "Deiter", "Walter")
_LAST_NAMES = ("Shultz", "Abrams", "Spencer", "White", "Bartels", "Walton", "Smith", "Jones", "Noris")


@functools.cache
def _pools() -> tuple[pa.Array, pa.Array, pa.Array]:
    """Full names, cities and states as Arrow arrays: built on first use, not at import (the
    first `pa.array` of Python objects imports pandas, half a second, where it is installed)."""
    names = pa.array([f"{first} {last}" for first in _FIRST_NAMES for last in _LAST_NAMES], pa.string())
    return names, pa.array(_US_CITIES, pa.string()), pa.array(_US_STATES, pa.string())



# Independent uses of the seed.
_EVENTS, _LETTERS, _WORDS, _URLS = range(4)
_POOL_SIZE = 1 << 20
_WORDS_MAX = 100  # Beam's longest random word string (an auction's description)
# Fields drawn per event, per kind (each a uint64; `high`/`low` split one into two 32-bit draws).
_P_NAME, _P_LOCAL, _P_DOMAIN, _P_CARD_A, _P_CARD_B, _P_PLACE, _P_EXTRA = range(7)
_A_SELLER, _A_CATEGORY, _A_INITIAL, _A_RESERVE, _A_ITEM, _A_DESCRIPTION, _A_EXTRA, _A_EXPIRES = range(8)
_B_AUCTION, _B_BIDDER, _B_PRICE, _B_CHANNEL, _B_EXTRA = range(5)


def kinds_of(ids: np.ndarray) -> np.ndarray:
    """The `EventKind` (as int8) of each event id."""
    rem = ids % PROPORTION_DENOMINATOR
    kinds = np.full(len(ids), EventKind.BID, dtype=np.int8)
    kinds[rem < PERSON_PROPORTION + AUCTION_PROPORTION] = EventKind.AUCTION
    kinds[rem < PERSON_PROPORTION] = EventKind.PERSON
    return kinds


def last_person(ids: np.ndarray) -> np.ndarray:
    """The base-0 id of the last person created at or before each event."""
    epoch, rem = np.divmod(ids, PROPORTION_DENOMINATOR)
    return epoch * PERSON_PROPORTION + np.minimum(rem, PERSON_PROPORTION - 1)


def last_auction(ids: np.ndarray) -> np.ndarray:
    """The base-0 id of the last auction created at or before each event (-1 before the first)."""
    epoch, rem = np.divmod(ids, PROPORTION_DENOMINATOR)
    offset = np.clip(rem - PERSON_PROPORTION, 0, AUCTION_PROPORTION - 1)
    before = rem < PERSON_PROPORTION  # a person: the last auction is the previous epoch's last
    return np.where(before, epoch * AUCTION_PROPORTION - 1, epoch * AUCTION_PROPORTION + offset)


def _price(u: np.ndarray) -> np.ndarray:
    """Beam's prices in cents, `round(100 * 10**(6u))`, from 64-bit draws."""
    return np.floor(np.power(10.0, unit(u) * 6.0) * 100.0 + 0.5).astype(np.int64)


def _extra_lengths(u32: np.ndarray, current: np.ndarray, average: int) -> np.ndarray:
    """Beam's padding: lengths that bring `current` bytes to `average` on average (+- 20 %)."""
    target = np.maximum(average - current, 0)
    delta = np.floor(target * 0.2 + 0.5).astype(np.int64)
    lengths: np.ndarray = target - delta + below(u32, 2 * delta)
    return lengths


def _word_lengths(u32: np.ndarray, longest: int) -> np.ndarray:
    """Beam's random string lengths: 3 to `longest - 1`."""
    return 3 + below(u32, longest - 3)


def _times(ms: np.ndarray) -> pa.Array:
    return pa.Array.from_buffers(TIMESTAMP, len(ms), [None, pa.py_buffer(np.ascontiguousarray(ms))])


@functools.lru_cache(maxsize=8)
def _channels(seed: int) -> tuple[pa.Array, pa.Array]:
    """The channel names and URLs, hot channels first: one shared dictionary per seed."""
    key = stream_key(seed, _URLS)
    count = len(HOT_CHANNELS) + CHANNELS_NUMBER
    names = list(HOT_CHANNELS) + [f"channel-{c}" for c in range(CHANNELS_NUMBER)]
    draws = EventDraws(key, np.arange(count, dtype=np.int64))
    parts = [below(low(draws.draw(p)), 26 ** 4).tolist() for p in range(3)]
    tagged = below(high(draws.draw(0)), 10).tolist()
    urls = []
    for i in range(count):
        path = "/".join(_letters(parts[p][i]) for p in range(3))
        url = f"https://www.nexmark.com/{path}/item.htm?query=1"
        channel = i - len(HOT_CHANNELS)
        if channel >= 0 and tagged[i] > 0:  # 9 in 10 numbered channels carry their id
            url += f"&channel_id={abs(_reverse_int32(channel))}"
        urls.append(url)
    return pa.array(names, pa.string()), pa.array(urls, pa.string())


def _letters(n: int) -> str:
    out = []
    for _ in range(4):
        n, r = divmod(n, 26)
        out.append(chr(ord("a") + r))
    return "".join(out)


def _reverse_int32(n: int) -> int:
    """Java's `Integer.reverse`: the 32 bits in reverse order, as a signed int."""
    r = int(f"{n & 0xFFFFFFFF:032b}"[::-1], 2)
    return r - (1 << 32) if r >= 1 << 31 else r


class NexmarkGenerator:
    """Builds batches of Nexmark events; every value is a pure function of (seed, event id).

    Args:
        config: the generator's parameters.
        clock: event time as a function of the event id.
        seed: selects one of many equally likely event streams.
    """

    def __init__(self, config: NexmarkConfig, clock: EventClock, seed: int) -> None:
        self.config = config
        self.clock = clock
        self.seed = seed
        self._key = stream_key(seed, _EVENTS)
        longest = max(config.avg_person_byte_size, config.avg_auction_byte_size, config.avg_bid_byte_size)
        self._letters = text_pool(stream_key(seed, _LETTERS), _POOL_SIZE, longest + longest // 5 + 2, False)
        self._words = text_pool(stream_key(seed, _WORDS), _POOL_SIZE, _WORDS_MAX, True)
        self._channel_names, self._channel_urls = _channels(seed)
        # How far ahead an auction's end may be: the event ids in which num_in_flight_auctions
        # more auctions are created.
        self._in_flight_events = config.num_in_flight_auctions * PROPORTION_DENOMINATOR // AUCTION_PROPORTION

    def events(self, ids: np.ndarray) -> pa.RecordBatch:
        """The events `ids` (int64, any order) as one batch with `EVENT_SCHEMA`, in that order."""
        ids = np.ascontiguousarray(ids, dtype=np.int64)
        kinds = kinds_of(ids)
        times = self.clock.times_ms(ids)
        time_column = _times(times)
        columns: list[pa.Array] = [pa.array(kinds, pa.int8()), time_column]
        for kind, build in ((EventKind.PERSON, self.persons), (EventKind.AUCTION, self.auctions),
                            (EventKind.BID, self.bids)):
            member = kinds == kind
            rows = np.flatnonzero(member)
            compact = build(ids[rows], times[rows])
            before = members_before(member)
            children = [
                time_column if name == "dateTime" else widen(compact.column(name), rows, before)
                for name in compact.schema.names
            ]
            struct_type = EVENT_SCHEMA.field(KIND_COLUMNS[kind]).type
            columns.append(pa.StructArray.from_arrays(children, fields=list(struct_type), mask=pa.array(~member)))
        return pa.RecordBatch.from_arrays(columns, schema=EVENT_SCHEMA)

    def _random_persons(self, ids: np.ndarray, u32: np.ndarray) -> np.ndarray:
        """Beam's random person (base 0): one of the last active persons, or a few ahead."""
        people = last_person(ids) + 1
        active = np.minimum(people, self.config.num_active_people)
        chosen: np.ndarray = people - active + below(u32, active + ID_LEAD)
        return chosen

    def persons(self, ids: np.ndarray, times: np.ndarray) -> pa.RecordBatch:
        """The persons created by events `ids` (all of kind person), with `PERSON_SCHEMA`."""
        draws = EventDraws(self._key, ids)
        u = draws.draw(_P_NAME)
        names = _pools()[0].take(pa.array(below(high(u), len(_FIRST_NAMES)) * len(_LAST_NAMES)
                                          + below(low(u), len(_LAST_NAMES))))
        u = draws.draw(_P_LOCAL)
        local_lengths = _word_lengths(high(u), 7)
        local = self._letters.strings(self._letters.starts(low(u)), local_lengths)
        u = draws.draw(_P_DOMAIN)
        domain_lengths = _word_lengths(high(u), 5)
        domain = self._letters.strings(self._letters.starts(low(u)), domain_lengths)
        emails = pc.binary_join_element_wise(local, pc.binary_join_element_wise(domain, ".com", ""), "@")
        a, b = draws.draw(_P_CARD_A), draws.draw(_P_CARD_B)
        cards = digit_groups([below(v, 10_000) for v in (high(a), low(a), high(b), low(b))], 4)
        u = draws.draw(_P_PLACE)
        cities = _pools()[1].take(pa.array(below(high(u), len(_US_CITIES))))
        states = _pools()[2].take(pa.array(below(low(u), len(_US_STATES))))
        current = (8 + pc.binary_length(names).to_numpy() + local_lengths + domain_lengths + 5 + 19
                   + pc.binary_length(cities).to_numpy() + 2)
        u = draws.draw(_P_EXTRA)
        extra = self._letters.strings(self._letters.starts(low(u)),
                                      _extra_lengths(high(u), current, self.config.avg_person_byte_size))
        person_ids = pa.array(last_person(ids) + FIRST_PERSON_ID)
        return pa.RecordBatch.from_arrays(
            [person_ids, names, emails, cards, cities, states, _times(times), extra], schema=PERSON_SCHEMA
        )

    def auctions(self, ids: np.ndarray, times: np.ndarray) -> pa.RecordBatch:
        """The auctions created by events `ids` (all of kind auction), with `AUCTION_SCHEMA`."""
        config = self.config
        draws = EventDraws(self._key, ids)
        u = draws.draw(_A_SELLER)
        hot = below(high(u), config.hot_sellers_ratio) > 0
        hot_seller = last_person(ids) // HOT_BATCH * HOT_BATCH
        sellers = np.where(hot, hot_seller, self._random_persons(ids, low(u))) + FIRST_PERSON_ID
        categories = FIRST_CATEGORY_ID + below(high(draws.draw(_A_CATEGORY)), NUM_CATEGORIES)
        initial = _price(draws.draw(_A_INITIAL))
        reserve = initial + _price(draws.draw(_A_RESERVE))
        horizon = self.clock.times_ms(ids + self._in_flight_events) - times
        length = 1 + np.floor(unit(draws.draw(_A_EXPIRES)) * np.maximum(horizon * 2, 1)).astype(np.int64)
        u = draws.draw(_A_ITEM)
        items = pc.utf8_trim(self._words.strings(self._words.starts(low(u)), _word_lengths(high(u), 20)), " ")
        u = draws.draw(_A_DESCRIPTION)
        descriptions = pc.utf8_trim(
            self._words.strings(self._words.starts(low(u)), _word_lengths(high(u), _WORDS_MAX)), " "
        )
        current = 8 + pc.binary_length(items).to_numpy() + pc.binary_length(descriptions).to_numpy() + 40
        u = draws.draw(_A_EXTRA)
        extra = self._letters.strings(self._letters.starts(low(u)),
                                      _extra_lengths(high(u), current, config.avg_auction_byte_size))
        auction_ids = last_auction(ids) + FIRST_AUCTION_ID
        return pa.RecordBatch.from_arrays(
            [pa.array(auction_ids), items, descriptions, pa.array(initial), pa.array(reserve), _times(times),
             _times(times + length), pa.array(sellers), pa.array(categories), extra],
            schema=AUCTION_SCHEMA,
        )

    def bids(self, ids: np.ndarray, times: np.ndarray) -> pa.RecordBatch:
        """The bids made by events `ids` (all of kind bid), with `BID_SCHEMA`."""
        config = self.config
        draws = EventDraws(self._key, ids)
        last = last_auction(ids)
        u = draws.draw(_B_AUCTION)
        hot = below(high(u), config.hot_auction_ratio) > 0
        oldest = np.maximum(last - config.num_in_flight_auctions, 0)
        random_auction = oldest + below(low(u), last - oldest + 1 + ID_LEAD)
        auctions = np.where(hot, last // HOT_BATCH * HOT_BATCH, random_auction) + FIRST_AUCTION_ID
        u = draws.draw(_B_BIDDER)
        hot = below(high(u), config.hot_bidders_ratio) > 0
        hot_bidder = last_person(ids) // HOT_BATCH * HOT_BATCH + 1
        bidders = np.where(hot, hot_bidder, self._random_persons(ids, low(u))) + FIRST_PERSON_ID
        prices = _price(draws.draw(_B_PRICE))
        u = draws.draw(_B_CHANNEL)
        hot = below(high(u), HOT_CHANNELS_RATIO) > 0
        channel = np.where(hot, below(low(u), len(HOT_CHANNELS)),
                           len(HOT_CHANNELS) + below(low(u), CHANNELS_NUMBER)).astype(np.int16)
        channel_index = pa.array(channel)
        u = draws.draw(_B_EXTRA)
        current = np.full(len(ids), 32, dtype=np.int64)
        extra = self._letters.strings(self._letters.starts(low(u)),
                                      _extra_lengths(high(u), current, config.avg_bid_byte_size))
        return pa.RecordBatch.from_arrays(
            [pa.array(auctions), pa.array(bidders), pa.array(prices),
             pa.DictionaryArray.from_arrays(channel_index, self._channel_names),
             pa.DictionaryArray.from_arrays(channel_index, self._channel_urls), _times(times), extra],
            schema=BID_SCHEMA,
        )
