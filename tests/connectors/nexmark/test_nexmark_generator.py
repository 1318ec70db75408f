"""The Nexmark generator: a pure function of (seed, event id) with Beam's distributions.

Statistical checks use a fixed seed and bounds of at least four standard deviations around
the expected value, so they test the distribution without depending on a lucky seed.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from epochal.connectors.nexmark import (
    AUCTION_SCHEMA,
    BID_SCHEMA,
    EVENT_SCHEMA,
    PERSON_SCHEMA,
    EventKind,
    NexmarkConfig,
    NexmarkGenerator,
    auctions,
    bids,
    columns,
    persons,
)
from epochal.connectors.nexmark.config import EventClock, event_clock
from epochal.connectors.nexmark.generator import last_auction, last_person

N = 50_000  # 1,000 persons, 3,000 auctions, 46,000 bids


def _generator(seed: int = 7, config: NexmarkConfig | None = None) -> NexmarkGenerator:
    config = config or NexmarkConfig()
    return NexmarkGenerator(config, event_clock(config, None), seed)


@pytest.fixture(scope="module")
def events() -> pa.RecordBatch:
    return _generator().events(np.arange(N, dtype=np.int64))


def test_the_batch_has_the_nexmark_schema_and_each_kind_its_own(events: pa.RecordBatch) -> None:
    events.validate(full=True)
    assert events.schema == EVENT_SCHEMA
    assert persons(events).schema == PERSON_SCHEMA
    assert auctions(events).schema == AUCTION_SCHEMA
    assert bids(events).schema == BID_SCHEMA
    kinds = events.column("kind").to_numpy()
    for kind, column in ((EventKind.PERSON, "person"), (EventKind.AUCTION, "auction"), (EventKind.BID, "bid")):
        valid = events.column(column).is_valid().to_numpy(zero_copy_only=False)
        assert (valid == (kinds == kind)).all(), f"{column} must be null exactly on the other kinds"
    for kind_batch in (persons(events), auctions(events), bids(events)):
        assert kind_batch.column("dateTime").null_count == 0


def test_kinds_come_in_the_proportions_1_3_46_by_event_number(events: pa.RecordBatch) -> None:
    kinds = events.column("kind").to_numpy()
    assert np.bincount(kinds).tolist() == [N // 50, 3 * N // 50, 46 * N // 50]
    assert kinds[:50].tolist() == [0, 1, 1, 1] + [2] * 46


def test_the_same_seed_gives_the_same_events_and_another_seed_others() -> None:
    ids = np.arange(10_000, 12_000, dtype=np.int64)
    first, again = _generator(seed=3).events(ids), _generator(seed=3).events(ids)
    assert first.equals(again)
    other = _generator(seed=4).events(ids)
    assert not bids(first).column("price").equals(bids(other).column("price"))


def test_any_range_of_ids_is_generated_directly_and_ranges_join_up() -> None:
    generator = _generator()
    a, b, c = 123_456, 124_000, 125_321
    whole = generator.events(np.arange(a, c, dtype=np.int64))
    parts = [generator.events(np.arange(a, b, dtype=np.int64)), generator.events(np.arange(b, c, dtype=np.int64))]
    assert pa.Table.from_batches(parts).equals(pa.Table.from_batches([whole]))


def test_an_event_does_not_depend_on_the_other_ids_it_is_generated_with() -> None:
    generator = _generator()
    ids = np.arange(5_000, 6_000, dtype=np.int64)
    shuffled = np.random.default_rng(0).permutation(ids)
    together = generator.events(ids)
    alone = generator.events(shuffled).take(pa.array(np.argsort(shuffled)))
    assert pa.Table.from_batches([alone]).equals(pa.Table.from_batches([together]))


def test_event_time_is_a_pure_function_of_the_event_id(events: pa.RecordBatch) -> None:
    config = NexmarkConfig()
    times = events.column("dateTime").cast(pa.int64()).to_numpy()
    ids = np.arange(N, dtype=np.int64)
    assert (times == config.base_time_ms + ids * 1000 // 10_000).all()  # Beam's default 10,000 events/s
    paced = NexmarkGenerator(config, event_clock(config, 2_000), 7).events(ids[:100])
    assert paced.column("dateTime").cast(pa.int64()).to_numpy().tolist() == (
        config.base_time_ms + ids[:100] * 1000 // 2_000
    ).tolist()
    fixed = NexmarkConfig(event_rate=500)
    assert event_clock(fixed, 2_000) == event_clock(fixed, None) == EventClock(fixed.base_time_ms, 500)


def test_persons_and_auctions_get_consecutive_ids(events: pa.RecordBatch) -> None:
    assert persons(events).column("id").to_numpy().tolist() == list(range(1000, 1000 + N // 50))
    assert auctions(events).column("id").to_numpy().tolist() == list(range(1000, 1000 + 3 * N // 50))


def _event_ids(kind: EventKind) -> np.ndarray:
    ids = np.arange(N, dtype=np.int64)
    rem = ids % 50
    mask = {EventKind.PERSON: rem == 0, EventKind.AUCTION: (rem >= 1) & (rem < 4), EventKind.BID: rem >= 4}[kind]
    selected: np.ndarray = ids[mask]
    return selected


def test_hot_auctions_bidders_and_sellers_take_beams_shares(events: pa.RecordBatch) -> None:
    bid, auction = bids(events), auctions(events)
    bid_ids, auction_ids = _event_ids(EventKind.BID), _event_ids(EventKind.AUCTION)
    hot_auction = last_auction(bid_ids) // 100 * 100 + 1000
    hot_bidder = last_person(bid_ids) // 100 * 100 + 1 + 1000
    hot_seller = last_person(auction_ids) // 100 * 100 + 1000
    # P(hot) = 1 - 1/ratio, plus the chance that a random pick lands on the hot one
    share = float(np.mean(bid.column("auction").to_numpy() == hot_auction))
    assert 0.495 <= share <= 0.52  # ratio 2: 0.5 + 0.5/111; 46,000 bids: sigma 0.0023
    share = float(np.mean(bid.column("bidder").to_numpy() == hot_bidder))
    assert 0.74 <= share <= 0.765  # ratio 4: 0.75 + a little; sigma 0.002
    share = float(np.mean(auction.column("seller").to_numpy() == hot_seller))
    assert 0.72 <= share <= 0.79  # ratio 4; 3,000 auctions: sigma 0.008


def test_random_persons_and_auctions_are_recent_or_a_few_ahead(events: pa.RecordBatch) -> None:
    bid, bid_ids = bids(events), _event_ids(EventKind.BID)
    auction = bid.column("auction").to_numpy() - 1000
    last = last_auction(bid_ids)
    assert ((auction >= np.maximum(last - 100, 0)) & (auction <= last + 10)).all()
    bidder = bid.column("bidder").to_numpy() - 1000
    people = last_person(bid_ids) + 1
    assert ((bidder >= people - np.minimum(people, 1000)) & (bidder < people + 10)).all()


def test_prices_are_log_uniform_cents_from_1_to_1_million_dollars(events: pa.RecordBatch) -> None:
    prices = bids(events).column("price").to_numpy()
    assert prices.min() >= 100 and prices.max() <= 100_000_000
    decades = np.log10(prices / 100)
    assert abs(float(np.mean(decades)) - 3.0) < 0.04  # uniform on [0, 6): sigma 1.73/sqrt(46,000)
    reserve = auctions(events).column("reserve").to_numpy()
    assert (reserve > auctions(events).column("initialBid").to_numpy()).all()


def test_auctions_expire_after_a_mean_of_the_in_flight_horizon(events: pa.RecordBatch) -> None:
    auction = auctions(events)
    length = (auction.column("expires").cast(pa.int64()).to_numpy()
              - auction.column("dateTime").cast(pa.int64()).to_numpy())
    assert length.min() >= 1
    horizon = 100 * 50 // 3 * 1000 / 10_000  # 1,666 events at 10,000 events/s: 166.6 ms
    assert abs(float(np.mean(length)) - horizon) < 9  # uniform on [1, 2 * horizon]: sigma 1.8
    categories = auction.column("category").to_numpy()
    assert set(np.unique(categories).tolist()) == {10, 11, 12, 13, 14}


def test_extra_pads_each_kind_to_its_average_size(events: pa.RecordBatch) -> None:
    bid_extra = pc.binary_length(bids(events).column("extra")).to_numpy()
    assert bid_extra.min() >= 54 and bid_extra.max() <= 81  # 68 +- 20 %, as Beam: 100 - 4 * 8
    assert abs(float(np.mean(bid_extra)) - 67.5) < 0.5
    auction = auctions(events)
    size = (8 + 40 + pc.binary_length(auction.column("itemName")).to_numpy()
            + pc.binary_length(auction.column("description")).to_numpy()
            + pc.binary_length(auction.column("extra")).to_numpy())
    assert abs(float(np.mean(size)) - 500) < 5
    small = _generator(config=NexmarkConfig(avg_bid_byte_size=10)).events(np.arange(4, 50, dtype=np.int64))
    assert set(bids(small).column("extra").to_pylist()) == {""}  # a bid is larger than 10 bytes already


def test_strings_look_like_beams(events: pa.RecordBatch) -> None:
    person = persons(events)
    cards = person.column("creditCard").to_pylist()
    assert all(len(c) == 19 and c[4] == c[9] == c[14] == " " and c.replace(" ", "").isdigit() for c in cards)
    emails = person.column("emailAddress").to_pylist()
    assert all(e.endswith(".com") and e.count("@") == 1 for e in emails)
    assert set(person.column("state").to_pylist()) == {"AZ", "CA", "ID", "OR", "WA", "WY"}
    names = auctions(events).column("itemName").to_pylist()
    assert all(n == n.strip() for n in names)
    channels = bids(events).column("channel").to_pylist()
    hot = sum(c in ("Google", "Facebook", "Baidu", "Apple") for c in channels) / len(channels)
    assert 0.49 <= hot <= 0.51  # 1/2 of 46,000 bids: sigma 0.0023
    urls = bids(events).column("url").to_pylist()
    assert all(u.startswith("https://www.nexmark.com/") for u in urls)


def test_the_gather_fallback_builds_the_same_strings_as_views(monkeypatch: pytest.MonkeyPatch) -> None:
    ids = np.arange(0, 3_000, dtype=np.int64)
    by_views = _generator().events(ids)
    monkeypatch.setattr(columns, "_STRING_VIEW", False)
    assert _generator().events(ids).equals(by_views)


def test_an_empty_set_of_ids_gives_an_empty_batch() -> None:
    batch = _generator().events(np.arange(0, dtype=np.int64))
    assert batch.num_rows == 0 and batch.schema == EVENT_SCHEMA
    only_bids = _generator().events(np.arange(4, 40, dtype=np.int64))
    assert persons(only_bids).num_rows == 0 and bids(only_bids).num_rows == 36
