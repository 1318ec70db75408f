"""A live rescale that hands a lagging split to a subtask whose watermark is ahead of it: no
record of the split turns late downstream (`runtime.splits`).

Before, the subtask that gained the split held its watermark where it was, ahead of the split's,
and the split's old owner stopped holding event time back (it went idle, or moved on with the
splits it kept): downstream windows fired past the split's position, and its records that came
after were dropped as late (400 and 266 of the 2,000 records here, every run). Found by a seeded stress of live
rescales near the end of input with event-time windows.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from epochal import CheckpointConfig, JobState, Source, SplitReader, StreamEnvironment, WatermarkStrategy
from epochal.testing import CollectSink
from epochal.windows import Tumbling

N = 2000
SPLITS = 3
KEYS = 5
LAGGING = 2  # the split that lags: read by subtask 2 at 3 readers, by subtask 0 at 2
LAG_AT = 600  # where it waits until the test lets it go on
AHEAD_AT = 1500  # where the others wait, when they are not read to their end


class _Split:
    def __init__(self, i: int) -> None:
        self.split_id = f"s{i}"
        self.index = i


class _Reader(SplitReader):
    """Split i: numbers i, i + SPLITS, ... below N, as events at x / 100 s; it has nothing (an
    empty read) past its `hold` until `go` is set."""

    def __init__(self, source: Lagging, split: _Split, position: int | None) -> None:
        self.source, self.split = source, split
        self.next = split.index if position is None else position

    def read(self, max_records: int) -> list[dict[str, Any]] | None:
        source, i = self.source, self.split.index
        if self.next >= N:
            source.done[i].set()
            return None
        if self.next >= source.hold[i] and not source.go.is_set():
            source.done[i].set()
            return []
        time.sleep(0.0005)
        out = list(range(self.next, min(N, self.next + 10 * SPLITS), SPLITS))
        self.next = out[-1] + SPLITS
        return [{"k": x % KEYS, "ts": x / 100} for x in out]

    def position(self) -> int:
        return self.next


class Lagging(Source):
    def __init__(self, others_hold: int) -> None:
        self.hold = [others_hold] * SPLITS
        self.hold[LAGGING] = LAG_AT
        self.done = [threading.Event() for _ in range(SPLITS)]  # read to its end, or to its hold
        self.go = threading.Event()

    def splits(self) -> list[Any]:
        return [_Split(i) for i in range(SPLITS)]

    def open_split(self, split: Any, position: Any | None) -> SplitReader:
        return _Reader(self, split, position)


def _by_definition() -> Counter[tuple[int, float, int]]:
    per_window: Counter[tuple[int, float]] = Counter((x % KEYS, x / 100 // 2.0 * 2.0) for x in range(N))
    return Counter((k, start, n) for (k, start), n in per_window.items())


@pytest.mark.parametrize("others", ["read to their end", "ahead, still reading"])
def test_a_lagging_split_handed_to_a_subtask_ahead_of_it_loses_no_record(tmp_path: Path, others: str) -> None:
    source = Lagging(N if others == "read to their end" else AHEAD_AT)
    sink = CollectSink()
    env = StreamEnvironment(parallelism=2, max_workers=3, executor="inprocess",
                            checkpoint=CheckpointConfig(interval=0.05, directory=str(tmp_path / "c")))
    events = env.from_source(source, watermarks=WatermarkStrategy.bounded_out_of_orderness(0.5, timestamp="ts"))
    events.uid("events").key_by("k").window(Tumbling(2.0)).count().uid("windows").sink_to(sink)
    handle = env.execute_async("lagging-split")
    deadline = time.monotonic() + 30
    while handle.status().state is not JobState.RUNNING:
        assert time.monotonic() < deadline
        time.sleep(0.005)
    handle.rescale(3, timeout=30)  # the lagging split to subtask 2, which has none: its watermark is behind
    assert all(done.wait(30) for done in source.done)  # subtask 0 ahead of the lagging split by seconds
    handle.rescale(2, timeout=30)  # the lagging split back to subtask 0; subtask 2 has nothing left
    source.go.set()
    result = handle.result(timeout=60)
    assert result.restarts == 0
    assert sum(op.late_records for op in result.operators) == 0
    assert Counter((key, start, n) for key, start, _, n in sink.committed()) == _by_definition()
