"""The stateful Nexmark queries of `examples/nexmark/` (q3, q4, q5, q6, q7, q8, q9, q11), run through
Epochal in process at parallelism 2, in event-id order and out of order, commit exactly what
plain pyarrow and numpy compute over the whole generated input as a batch (the SQL's meaning);
q12, on processing time, commits what can be checked without the clock. A run with a failure
half-way commits the same (state and timers restored from a checkpoint).

Window queries run with a generator at 1,000 events per second of event time, so that a few
tens of thousands of events span several 10 s windows.
"""

from __future__ import annotations

import collections
import importlib.util
import os
import sys
import types
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from epochal import CheckpointConfig, Source, SplitReader, StreamEnvironment, WatermarkStrategy
from epochal.connectors.nexmark import NexmarkConfig, NexmarkSource
from epochal.testing import CollectSink

EXAMPLES = os.path.join(os.path.dirname(__file__), "..", "..", "..", "examples", "nexmark")
SEED = 3
SLOW = NexmarkConfig(event_rate=1_000)  # 1 ms of event time per event


def _load_harness() -> types.ModuleType:
    spec = importlib.util.spec_from_file_location("nexmark_harness", os.path.join(EXAMPLES, "harness.py"))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


HARNESS = sys.modules.get("nexmark_harness") or _load_harness()


def _run(name: str, events: int, *, group: int = 1, config: NexmarkConfig | None = None,
         parallelism: int = 2) -> list[Any]:
    """Run `examples/nexmark/<name>.py`'s query; its committed records."""
    query = HARNESS.load(os.path.join(EXAMPLES, f"{name}.py")).query
    sink = CollectSink()
    HARNESS.run(query, name=name, events=events, parallelism=parallelism, seed=SEED,
                out_of_order_group=group, sink=sink, config=config, batch_size=256)
    return [tuple(r) for r in sink.committed()]


def _kind(events: int | pa.RecordBatch, kind: str, config: NexmarkConfig | None = None) -> pa.Table:
    """Every event of one kind in the whole input (`events` of the source, or a batch of them),
    flattened, with `ms` (event time, int64)."""
    if isinstance(events, int):
        events = NexmarkSource(events=events, seed=SEED, config=config).slots(0, events)
    table = pa.Table.from_batches([events])
    code = {"person": 0, "auction": 1, "bid": 2}[kind]
    rows = table.filter(pc.equal(table["kind"], code)).column(kind).combine_chunks()
    flat = pa.Table.from_arrays(rows.flatten(), names=[f.name for f in rows.type])
    return flat.append_column("ms", flat["dateTime"].cast(pa.int64()))


class _BatchSplit(NamedTuple):
    split_id: str
    start: int
    stop: int


class _BatchReader(SplitReader):
    def __init__(self, batch: pa.RecordBatch, split: _BatchSplit, position: int | None) -> None:
        self.batch, self.next, self.stop = batch, split.start if position is None else position, split.stop

    def read(self, max_records: int) -> pa.RecordBatch | None:
        if self.next >= self.stop:
            return None
        n = min(max_records, self.stop - self.next)
        self.next += n
        return self.batch.slice(self.next - n, n)

    def position(self) -> int:
        return self.next


class _BatchSource(Source):
    """A given batch of Nexmark events, cut into contiguous splits (for inputs the generator
    does not make, such as many equal prices)."""

    def __init__(self, batch: pa.RecordBatch, splits: int) -> None:
        self.batch = batch
        bounds = [batch.num_rows * k // splits for k in range(splits + 1)]
        self._splits = [_BatchSplit(f"batch-{k}", bounds[k], bounds[k + 1]) for k in range(splits)]

    def splits(self) -> Sequence[_BatchSplit]:
        return self._splits

    def open_split(self, split: Any, position: Any | None) -> SplitReader:
        return _BatchReader(self.batch, split, position)


def _run_batch(name: str, batch: pa.RecordBatch, tmp_path: Any) -> list[Any]:
    """Run a query over a given batch of events (in event-time order), at parallelism 2."""
    query = HARNESS.load(os.path.join(EXAMPLES, f"{name}.py")).query
    sink = CollectSink()
    env = StreamEnvironment(parallelism=2, executor="inprocess", batch_size=256,
                            checkpoint=CheckpointConfig(interval=1.0, directory=str(tmp_path)))
    events = env.from_source(_BatchSource(batch, splits=2),
                             watermarks=WatermarkStrategy.for_monotonous_timestamps(timestamp="dateTime"))
    query(events).sink_to(sink)
    env.execute(f"nexmark-{name}-batch")
    return [tuple(r) for r in sink.committed()]


def _with_bid_prices(batch: pa.RecordBatch, prices: Callable[[np.ndarray], np.ndarray]) -> pa.RecordBatch:
    """The batch with its bids' prices replaced by `prices(old prices)`."""
    bid = batch.column("bid")
    names = [f.name for f in bid.type]
    children = [bid.field(n) for n in names]
    price = names.index("price")
    children[price] = pa.array(prices(children[price].to_numpy(zero_copy_only=False)))
    rebuilt = pa.StructArray.from_arrays(children, fields=list(bid.type), mask=bid.is_null())
    return batch.set_column(batch.schema.get_field_index("bid"), "bid", rebuilt)


def _ms(seconds: float) -> int:
    return round(seconds * 1000)


# -- q3 -------------------------------------------------------------------------------------------

def _q3_reference(events: int) -> collections.Counter[tuple[Any, ...]]:
    persons = _kind(events, "person")
    persons = persons.filter(pc.is_in(persons["state"], value_set=pa.array(["OR", "ID", "CA"])))
    auctions = _kind(events, "auction").filter(pc.equal(_kind(events, "auction")["category"], 10))
    joined = (auctions.select(["id", "seller"]).rename_columns(["auction", "seller"])
              .join(persons.select(["id", "name", "city", "state"]), "seller", "id", join_type="inner"))
    return collections.Counter(zip(*(joined[c].to_pylist() for c in ["name", "city", "state", "auction"])))


@pytest.mark.parametrize("group", [1, 200])
def test_q3_joins_local_sellers_with_their_category_10_auctions(group: int) -> None:
    events = 40_000
    expected = _q3_reference(events)
    assert sum(expected.values()) > 50
    assert collections.Counter(_run("q3", events, group=group)) == expected


# -- q4 -------------------------------------------------------------------------------------------

def _q4_reference(events: int) -> dict[int, list[int]]:
    """Per category, the winning prices of its auctions (those with a bid in their lifetime)."""
    auctions = _kind(events, "auction").select(["id", "category", "ms", "expires"])
    auctions = auctions.append_column("expires_ms", auctions["expires"].cast(pa.int64())).drop_columns(["expires"])
    bids = _kind(events, "bid").select(["auction", "price", "ms"]).rename_columns(["auction", "price", "bid_ms"])
    joined = bids.join(auctions, "auction", "id", join_type="inner")
    joined = joined.filter(pc.and_(pc.greater_equal(joined["bid_ms"], joined["ms"]),
                                   pc.less_equal(joined["bid_ms"], joined["expires_ms"])))
    winners = joined.group_by(["auction", "category"]).aggregate([("price", "max")])
    per_category: dict[int, list[int]] = collections.defaultdict(list)
    for category, price in zip(winners["category"].to_pylist(), winners["price_max"].to_pylist()):
        per_category[category].append(price)
    return per_category


@pytest.mark.parametrize("group", [1, 300])
def test_q4_averages_the_winning_bids_per_category(group: int) -> None:
    events = 30_000
    expected = _q4_reference(events)
    committed = _run("q4", events, group=group)
    updates: dict[int, list[tuple[int, float]]] = collections.defaultdict(list)
    for category, average, auctions in committed:
        updates[category].append((auctions, average))
    assert set(updates) == set(expected) and len(expected) == 5
    for category, prices in expected.items():
        counts = sorted(n for n, _ in updates[category])
        assert counts == list(range(1, len(prices) + 1)), category  # one update per closed auction
        assert max(updates[category])[1] == sum(prices) / len(prices), category


# -- q9 and q6 ------------------------------------------------------------------------------------

def _q9_reference(events: int) -> collections.Counter[tuple[Any, ...]]:
    """Per auction with a bid in its lifetime, the winner: the highest price, then the earliest,
    then the lowest bidder id."""
    auctions = _kind(events, "auction").select(["id", "seller", "category", "ms", "expires"])
    auctions = auctions.append_column("expires_ms", auctions["expires"].cast(pa.int64())).drop_columns(["expires"])
    bids = (_kind(events, "bid").select(["auction", "bidder", "price", "ms"])
            .rename_columns(["auction", "bidder", "price", "bid_ms"]))
    joined = bids.join(auctions, "auction", "id", join_type="inner")
    joined = joined.filter(pc.and_(pc.greater_equal(joined["bid_ms"], joined["ms"]),
                                   pc.less_equal(joined["bid_ms"], joined["expires_ms"])))
    best: dict[int, tuple[Any, ...]] = {}
    for row in joined.to_pylist():
        rank = (-row["price"], row["bid_ms"], row["bidder"])
        if row["auction"] not in best or rank < best[row["auction"]][0]:
            best[row["auction"]] = (rank, (row["auction"], row["seller"], row["category"], row["expires_ms"],
                                           row["bidder"], row["price"], row["bid_ms"]))
    return collections.Counter(winner for _, winner in best.values())


@pytest.mark.parametrize("group", [1, 300])
def test_q9_emits_each_auction_with_its_winning_bid(group: int) -> None:
    events = 30_000
    expected = _q9_reference(events)
    assert sum(expected.values()) > 500
    assert collections.Counter(_run("q9", events, group=group)) == expected


def test_q9_breaks_ties_by_time_then_bidder(tmp_path: Any) -> None:
    """Prices 0..4: many bids of an auction tie for the highest price."""
    events = 20_000
    batch = _with_bid_prices(NexmarkSource(events=events, seed=SEED).slots(0, events), lambda p: p % 5)
    expected = _q9_reference_of_batch(batch)
    assert collections.Counter(_run_batch("q9", batch, tmp_path)) == expected


def _q9_reference_of_batch(batch: pa.RecordBatch) -> collections.Counter[tuple[Any, ...]]:
    auctions = _kind(batch, "auction").select(["id", "seller", "category", "ms", "expires"])
    bids = _kind(batch, "bid")
    best: dict[int, tuple[Any, ...]] = {}
    lifetimes = {a["id"]: a for a in auctions.to_pylist()}
    for bid in bids.to_pylist():
        auction = lifetimes.get(bid["auction"])
        if auction is None:
            continue
        expires_ms = round(auction["expires"].timestamp() * 1000)
        if not auction["ms"] <= bid["ms"] <= expires_ms:
            continue
        rank = (-bid["price"], bid["ms"], bid["bidder"])
        if bid["auction"] not in best or rank < best[bid["auction"]][0]:
            best[bid["auction"]] = (rank, (bid["auction"], auction["seller"], auction["category"], expires_ms,
                                           bid["bidder"], bid["price"], bid["ms"]))
    return collections.Counter(winner for _, winner in best.values())


def _q6_reference(events: int) -> collections.Counter[tuple[Any, ...]]:
    """Per seller, in order of closing (expires, then auction id), the average of the last 10
    winning prices."""
    by_seller: dict[int, list[tuple[int, int, int]]] = collections.defaultdict(list)
    for auction, seller, _category, expires_ms, _bidder, price, _bid_ms in _q9_reference(events):
        by_seller[seller].append((expires_ms, auction, price))
    out: collections.Counter[tuple[Any, ...]] = collections.Counter()
    for seller, closed in by_seller.items():
        last: list[int] = []
        for _, auction, price in sorted(closed):
            last = (last + [price])[-10:]
            out[(seller, auction, sum(last) / len(last))] += 1
    return out


@pytest.mark.parametrize("group", [1, 300])
def test_q6_averages_each_sellers_last_ten_closed_auctions(group: int) -> None:
    events = 40_000
    expected = _q6_reference(events)
    sellers = collections.Counter(s for s, _, _ in expected)
    assert max(sellers.values()) > 10  # the hot seller closes more than 10: the window slides
    assert collections.Counter(_run("q6", events, group=group)) == expected


# -- q10 ------------------------------------------------------------------------------------------

def test_q10_writes_every_bid_once_in_partitions_of_day_and_minute(tmp_path: Any) -> None:
    import pyarrow.dataset as ds

    events, config = 20_000, NexmarkConfig(event_rate=200)  # 100 s of event time: two minutes
    q10 = HARNESS.load(os.path.join(EXAMPLES, "q10.py"))
    out = str(tmp_path / "out")
    HARNESS.run(q10.query, name="q10", events=events, parallelism=2, seed=SEED, sink=q10.sink(out),
                config=config, batch_size=256)
    written = ds.dataset(out, format="parquet", partitioning="hive").to_table()
    bids = _kind(events, "bid", config)
    expected = collections.Counter(zip(bids["auction"].to_pylist(), bids["price"].to_pylist(),
                                       [t.strftime("%Y-%m-%d") for t in bids["dateTime"].to_pylist()],
                                       [t.strftime("%H:%M") for t in bids["dateTime"].to_pylist()]))
    got = collections.Counter(zip(*(written[c].to_pylist() for c in ["auction", "price", "dt", "hm"])))
    assert got == expected
    minutes = sorted(os.listdir(os.path.join(out, "dt=2015-07-15")))
    assert len(minutes) >= 2 and all(m.startswith("hm=00%3A") for m in minutes)  # ':' escaped as Spark does
    files = [f for m in minutes for f in os.listdir(os.path.join(out, "dt=2015-07-15", m))]
    assert files and all(f.startswith("part-") for f in files)


# -- q5 -------------------------------------------------------------------------------------------

def _q5_reference(events: int, config: NexmarkConfig) -> collections.Counter[tuple[Any, ...]]:
    bids = _kind(events, "bid", config)
    ms = bids["ms"].to_numpy()
    first = ms - ms % 2_000  # the latest window holding a bid starts at its 2 s slice
    starts = np.concatenate([first - k * 2_000 for k in range(5)])
    auctions = np.tile(bids["auction"].to_numpy(), 5)
    counts = (pa.table({"auction": auctions, "start": starts})
              .group_by(["auction", "start"]).aggregate([("auction", "count")]))
    best = counts.group_by("start").aggregate([("auction_count", "max")])
    top = counts.join(best, "start").filter(pc.equal(pc.field("auction_count"), pc.field("auction_count_max")))
    return collections.Counter((a, n, s, s + 10_000) for a, n, s in
                               zip(*(top[c].to_pylist() for c in ["auction", "auction_count", "start"])))


NO_HOT_AUCTIONS = NexmarkConfig(event_rate=1_000, hot_auction_ratio=1)  # every auction as likely: ties


@pytest.mark.parametrize(("group", "config"), [(1, SLOW), (500, SLOW), (1, NO_HOT_AUCTIONS), (500, NO_HOT_AUCTIONS)])
def test_q5_emits_the_auctions_with_the_most_bids_per_sliding_window(group: int, config: NexmarkConfig) -> None:
    events = 40_000
    expected = _q5_reference(events, config)
    committed = collections.Counter((a, n, _ms(s), _ms(e)) for a, n, s, e in _run("q5", events, group=group,
                                                                                   config=config))
    assert len({s for _, _, s, _ in expected}) > 20  # windows
    if config is NO_HOT_AUCTIONS:
        assert sum(expected.values()) > len({s for _, _, s, _ in expected})  # ties
    assert committed == expected


# -- q7 -------------------------------------------------------------------------------------------

def _q7_reference(events: int | pa.RecordBatch) -> collections.Counter[tuple[Any, ...]]:
    bids = _kind(events, "bid", SLOW)
    ms = bids["ms"].to_numpy()
    bids = bids.append_column("window", pa.array(ms - ms % 10_000))
    best = bids.group_by("window").aggregate([("price", "max")])
    top = bids.join(best, "window").filter(pc.equal(pc.field("price"), pc.field("price_max")))
    columns = ["auction", "bidder", "price", "dateTime", "extra"]
    return collections.Counter(zip(*(top[c].to_pylist() for c in columns)))


@pytest.mark.parametrize("group", [1, 500])
def test_q7_emits_the_highest_bids_per_tumbling_window(group: int) -> None:
    events = 40_000
    expected = _q7_reference(events)
    assert sum(expected.values()) >= 4  # windows
    assert collections.Counter(_run("q7", events, group=group, config=SLOW)) == expected


def test_q7_emits_every_bid_that_ties_for_the_highest_price(tmp_path: Any) -> None:
    events = 30_000
    batch = _with_bid_prices(NexmarkSource(events=events, seed=SEED, config=SLOW).slots(0, events),
                             lambda p: p % 20)  # prices 0..19: many bids share a window's top price
    expected = _q7_reference(batch)
    assert sum(expected.values()) > 3 * len({r[3].timestamp() // 10 for r in expected})  # ties
    assert collections.Counter(_run_batch("q7", batch, tmp_path)) == expected


# -- q8 -------------------------------------------------------------------------------------------

def _q8_reference(events: int) -> collections.Counter[tuple[Any, ...]]:
    persons = _kind(events, "person", SLOW)
    auctions = _kind(events, "auction", SLOW)
    p_ms, a_ms = persons["ms"].to_numpy(), auctions["ms"].to_numpy()
    people = pa.table({"id": persons["id"], "name": persons["name"], "window": p_ms - p_ms % 10_000})
    sellers = (pa.table({"id": auctions["seller"], "window": a_ms - a_ms % 10_000})
               .group_by(["id", "window"]).aggregate([]))
    joined = people.join(sellers, ["id", "window"], join_type="inner")
    starts = joined["window"].cast(pa.timestamp("ms", tz="UTC")).to_pylist()
    return collections.Counter(zip(joined["id"].to_pylist(), joined["name"].to_pylist(), starts))


@pytest.mark.parametrize("group", [1, 500])
def test_q8_emits_the_persons_with_an_auction_in_their_window(group: int) -> None:
    events = 40_000
    expected = _q8_reference(events)
    assert sum(expected.values()) > 20
    assert collections.Counter(_run("q8", events, group=group, config=SLOW)) == expected


# -- q11 ------------------------------------------------------------------------------------------

def _q11_reference(events: int) -> collections.Counter[tuple[Any, ...]]:
    """Per bidder, runs of bids at most 10 s apart: (bidder, first ms, last ms + 10 s, count)."""
    bids = _kind(events, "bid", SLOW)
    bidder, ms = bids["bidder"].to_numpy(), bids["ms"].to_numpy()
    order = np.lexsort((ms, bidder))
    bidder, ms = bidder[order], ms[order]
    new = np.r_[True, (bidder[1:] != bidder[:-1]) | (ms[1:] - ms[:-1] > 10_000)]
    starts = np.flatnonzero(new)
    ends = np.r_[starts[1:], len(ms)] - 1
    return collections.Counter(zip(bidder[starts].tolist(), ms[starts].tolist(), (ms[ends] + 10_000).tolist(),
                                   (ends - starts + 1).tolist()))


@pytest.mark.parametrize("group", [1, 500])
def test_q11_counts_the_bids_of_each_session(group: int) -> None:
    events = 40_000
    expected = _q11_reference(events)
    committed = collections.Counter((b, _ms(s), _ms(e), n) for b, s, e, n in _run("q11", events, group=group,
                                                                                   config=SLOW))
    assert sum(n for (_, _, _, n), k in expected.items() for _ in range(k)) == len(_kind(events, "bid", SLOW))
    assert committed == expected


# -- q12 ------------------------------------------------------------------------------------------

def test_q12_counts_every_bid_once_in_aligned_10_second_windows() -> None:
    events = 20_000
    bids = _kind(events, "bid")
    expected = collections.Counter(bids["bidder"].to_pylist())
    committed = _run("q12", events, group=100)
    per_bidder: collections.Counter[int] = collections.Counter()
    windows: set[tuple[int, int, int]] = set()
    for bidder, start, end, count in committed:
        per_bidder[bidder] += count
        assert _ms(end) - _ms(start) == 10_000 and _ms(start) % 10_000 == 0, (start, end)
        assert (bidder, _ms(start), _ms(end)) not in windows  # each window fires once
        windows.add((bidder, _ms(start), _ms(end)))
    assert per_bidder == expected


# -- restore ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["q3", "q5"])
def test_a_query_restored_from_a_checkpoint_commits_its_results_once(name: str) -> None:
    """A failure half-way: the join's and the windows' keyed state and timers come back from the
    checkpoint, and the committed output is the reference's, no row lost or repeated."""
    import time

    events, config = 30_000, (None if name == "q3" else SLOW)
    expected = _q3_reference(events) if name == "q3" else _q5_reference(events, SLOW)
    query = HARNESS.load(os.path.join(EXAMPLES, f"{name}.py")).query
    batches, failed = [0], [False]

    def failing_once(batch: pa.RecordBatch) -> pa.RecordBatch:
        batches[0] += 1
        if batches[0] == 100 and not failed[0]:
            failed[0] = True
            raise RuntimeError("failing once, half-way")
        time.sleep(0.002)  # spreads the run over several checkpoints
        return batch

    def with_failure(events: Any) -> Any:
        return query(events.map_batches(failing_once, name="fail-once"))

    sink = CollectSink()
    run = HARNESS.run(with_failure, name=name, events=events, seed=SEED, sink=sink, config=config,
                      batch_size=100, checkpoint_interval=0.05, out_of_order_group=100)
    assert run.result.restarts == 1 and run.result.restored_from[-1] is not None
    committed = [tuple(r) for r in sink.committed()]
    if name == "q5":
        committed = [(a, n, _ms(s), _ms(e)) for a, n, s, e in committed]
    assert collections.Counter(committed) == expected
