"""NexmarkSource: interleaved splits, exact resumption from any position, bounded
out-of-orderness, and pacing in wall time."""

from __future__ import annotations

import pickle

import numpy as np
import pyarrow as pa
import pytest

from epochal.connectors.nexmark import EVENT_SCHEMA, NexmarkConfig, NexmarkSource
from epochal.connectors.nexmark.order import EmissionOrder
from epochal.connectors.nexmark.source import NexmarkReader


def _read_all(
    source: NexmarkSource, split_index: int, position: int | None = None, size: int = 700
) -> list[pa.RecordBatch]:
    reader = source.open_split(source.splits()[split_index], position)
    batches = []
    while (batch := reader.read(size)) is not None:
        batches.append(batch)
    return batches


def _table(batches: list[pa.RecordBatch]) -> pa.Table:
    return pa.Table.from_batches(batches, schema=EVENT_SCHEMA)


def _times(table: pa.Table | pa.RecordBatch) -> np.ndarray:
    return np.asarray(table.column("dateTime").cast(pa.int64()).to_numpy())


def test_splits_interleave_the_slots_and_together_hold_the_stream_once() -> None:
    source = NexmarkSource(events=10_001, seed=5, splits=3)
    assert [s.split_id for s in source.splits()] == ["nexmark-0-of-3", "nexmark-1-of-3", "nexmark-2-of-3"]
    whole = source.slots(0, 10_001)
    for k in range(3):
        got = _table(_read_all(source, k))
        assert got.equals(pa.Table.from_batches([whole.take(pa.array(np.arange(k, 10_001, 3)))]))


def test_a_reader_resumes_exactly_where_another_stopped() -> None:
    source = NexmarkSource(events=20_000, seed=11, splits=2, out_of_order_group=16)
    reader = source.open_split(source.splits()[1], None)
    before = [reader.read(333) for _ in range(7)]
    position = reader.position()
    assert position == 1 + 2 * 333 * 7
    rest = _read_all(pickle.loads(pickle.dumps(source)), 1, pickle.loads(pickle.dumps(position)), size=1000)
    uninterrupted = _read_all(source, 1, size=512)
    assert _table(before + rest).equals(_table(uninterrupted))


@pytest.mark.parametrize("position", [0, 2, 7, -1, "3"])
def test_a_position_of_another_split_is_refused(position: object) -> None:
    source = NexmarkSource(events=100, splits=4)
    with pytest.raises(ValueError, match="not a position of split nexmark-1-of-4"):
        source.open_split(source.splits()[1], position)


def test_the_source_is_the_same_whatever_the_batch_sizes() -> None:
    source = NexmarkSource(events=30_000, seed=2, out_of_order_group=100)
    small = _table(_read_all(source, 0, size=97))
    large = _table(_read_all(source, 0, size=30_000))
    capped = _table(_read_all(NexmarkSource(events=30_000, seed=2, out_of_order_group=100, batch_size=50), 0))
    assert small.equals(large) and capped.equals(large)
    assert max(b.num_rows for b in _read_all(NexmarkSource(events=1_000, batch_size=50), 0)) == 50


def test_out_of_order_groups_shuffle_within_the_group_only() -> None:
    group, events = 50, 10_000 + 17  # the last group is shorter
    order = EmissionOrder(key=123, group=group, events=events)
    slots = np.arange(events, dtype=np.int64)
    ids = order.event_ids(slots)
    assert sorted(ids.tolist()) == slots.tolist()  # a permutation of the stream
    assert (ids // group == slots // group).all()  # within groups
    moved = np.mean([(ids[g:g + group] != slots[g:g + group]).any() for g in range(0, events, group)])
    assert moved > 0.95  # and actually shuffled
    assert (order.event_ids(slots[5_003:7_001]) == ids[5_003:7_001]).all()  # pointwise


def test_out_of_order_event_times_stay_within_the_group_bound() -> None:
    group = 40
    config = NexmarkConfig(event_rate=1_000)  # 1 ms per event: times are the event ids
    source = NexmarkSource(events=8_000, seed=3, out_of_order_group=group, config=config)
    times = _times(source.slots(0, 8_000)) - config.base_time_ms
    slots = np.arange(8_000)
    assert (times // group == slots // group).all()
    assert sorted(times.tolist()) == slots.tolist()
    assert (np.abs(np.diff(times)) < 2 * group).all()
    in_order = _times(NexmarkSource(events=8_000, seed=3, config=config).slots(0, 8_000)) - config.base_time_ms
    assert (in_order == slots).all()


def test_event_time_does_not_depend_on_the_pace() -> None:
    config = NexmarkConfig(event_rate=10_000)
    fast = NexmarkSource(events=3_000, seed=1, config=config)
    paced = NexmarkSource(events=3_000, seed=1, events_per_second=1_000_000, config=config)
    assert _table(_read_all(fast, 0)).equals(_table(_read_all(paced, 0)))


class _FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_paced_reader_hands_out_only_the_events_that_are_due() -> None:
    source = NexmarkSource(events=1_000, events_per_second=1_000, splits=2)
    clock = _FakeClock()
    readers = []
    for split in source.splits():
        reader = source.open_split(split, None)
        assert isinstance(reader, NexmarkReader)
        reader.clock = clock
        readers.append(reader)
    # a reader's first slot is due when it first reads: slots 0 and 1
    assert [r.read(100).num_rows for r in readers] == [1, 1]  # type: ignore[union-attr]
    empty = readers[0].read(100)  # slot 2 is due 2 ms after slot 0
    assert empty is not None and empty.num_rows == 0 and empty.schema == EVENT_SCHEMA
    clock.now += 0.0105  # 10.5 ms later: slots 2, 4, .., 10 and 3, 5, .., 11 are due
    assert [r.read(100).num_rows for r in readers] == [5, 5]  # type: ignore[union-attr]
    clock.now += 10.0
    assert [r.read(10_000).num_rows for r in readers] == [494, 494]  # type: ignore[union-attr]
    assert [r.read(100) for r in readers] == [None, None]


def test_a_restored_paced_reader_starts_from_its_position_not_from_zero() -> None:
    source = NexmarkSource(events_per_second=1_000)
    reader = source.open_split(source.splits()[0], 5_000)
    assert isinstance(reader, NexmarkReader)
    clock = _FakeClock()
    reader.clock = clock
    assert reader.read(100).num_rows == 1  # type: ignore[union-attr]
    clock.now += 0.05
    assert reader.read(100).num_rows == 50  # type: ignore[union-attr]


def test_an_unbounded_source_never_ends() -> None:
    source = NexmarkSource(seed=9)
    reader = source.open_split(source.splits()[0], 10**12)
    batch = reader.read(1_000)
    assert isinstance(batch, pa.RecordBatch) and batch.num_rows == 1_000
    assert reader.position() == 10**12 + 1_000


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"events": -1}, ValueError),
        ({"events_per_second": 0}, ValueError),
        ({"out_of_order_group": 0}, ValueError),
        ({"splits": 0}, ValueError),
        ({"batch_size": 0}, ValueError),
        ({"seed": 1.5}, TypeError),
        ({"config": {"hot_auction_ratio": 2}}, TypeError),
    ],
)
def test_arguments_are_checked(kwargs: dict[str, object], error: type[Exception]) -> None:
    with pytest.raises(error):
        NexmarkSource(**kwargs)  # type: ignore[arg-type]


def test_config_values_are_checked() -> None:
    with pytest.raises(ValueError, match="hot_auction_ratio"):
        NexmarkConfig(hot_auction_ratio=0)
    with pytest.raises(TypeError, match="event_rate"):
        NexmarkConfig(event_rate=2.5)  # type: ignore[arg-type]
