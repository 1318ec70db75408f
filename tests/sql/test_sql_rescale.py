"""A SQL job's state is keyed state like any other: rescaled while running, exactly once."""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path
from typing import Any

from epochal import CheckpointConfig, JobState, Source, SplitReader, StreamEnvironment
from epochal.testing import CollectSink

N = 4000


class _Split:
    def __init__(self, i: int) -> None:
        self.split_id = f"rows-{i}"
        self.index = i


class _Reader(SplitReader):
    """Rows {k, x} for x = i, i + 2, ... below N, ten a read, a millisecond apart."""

    def __init__(self, split: _Split, position: int | None) -> None:
        self.next = split.index if position is None else position

    def read(self, max_records: int) -> list[dict[str, Any]] | None:
        if self.next >= N:
            return None
        time.sleep(0.001)
        out = [{"k": f"k{x % 7}", "x": x} for x in range(self.next, min(N, self.next + 20), 2)]
        self.next = out[-1]["x"] + 2
        return out

    def position(self) -> int:
        return self.next


class Rows(Source):
    def splits(self) -> list[Any]:
        return [_Split(0), _Split(1)]

    def open_split(self, split: Any, position: Any | None) -> SplitReader:
        return _Reader(split, position)


def _wait_running(handle: Any, parallelism: int) -> None:
    deadline = time.monotonic() + 30
    while not (handle.status().state is JobState.RUNNING and handle.status().parallelism == parallelism):
        assert time.monotonic() < deadline, handle.status()
        time.sleep(0.005)


def test_a_running_sql_aggregate_rescaled_while_running_commits_each_update_once(tmp_path: Path) -> None:
    sink = CollectSink()
    env = StreamEnvironment(parallelism=1, executor="inprocess",
                            checkpoint=CheckpointConfig(interval=0.2, directory=str(tmp_path / "c")))
    env.create_view("t", env.from_source(Rows()), schema="k STRING, x BIGINT")
    env.sql("SELECT k, count(*) AS n, sum(x) AS s FROM t GROUP BY k", emit="per_record").sink_to(sink)
    handle = env.execute_async("sql-rescaled")
    _wait_running(handle, 1)
    handle.rescale(3, timeout=30)
    _wait_running(handle, 3)
    handle.rescale(2, timeout=30)
    handle.result(timeout=120)
    rows = sink.committed()
    sizes = Counter(f"k{x % 7}" for x in range(N))
    assert Counter((k, n) for k, n, _ in rows) == Counter((k, n) for k, size in sizes.items()
                                                          for n in range(1, size + 1))  # every update once
    final = {k: s for k, n, s in rows if n == sizes[k]}
    assert final == {f"k{j}": sum(x for x in range(N) if x % 7 == j) for j in range(7)}
