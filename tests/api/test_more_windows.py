"""Windows in processing time and by count, window_all, and triggers, through the API: exactly
once across a crash and a rescale, one subtask for window_all, and what the API refuses."""

from __future__ import annotations

import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from epochal import CheckpointConfig, GraphError, RestartStrategy, StreamEnvironment, WatermarkStrategy
from epochal.testing import CollectSink, Crash, ListSource
from epochal.windows import CountTrigger, EventTimeTrigger, ProcessingTimeTrigger, Sliding, Tumbling


def _paced(x: Any) -> Any:
    time.sleep(0.0002)  # the job spans many checkpoint intervals
    return x


def _count_windows_expected(records: list[tuple[str, int]], size: int) -> list[tuple[str, int]]:
    by_key: dict[str, list[int]] = defaultdict(list)
    for k, v in records:
        by_key[k].append(v)
    return sorted((k, sum(vs[i:i + size])) for k, vs in by_key.items() for i in range(0, len(vs) - size + 1, size))


def test_count_windows_are_exact_across_a_crash(tmp_path: Path) -> None:
    records = [(f"k{i % 7}", i) for i in range(2000)]
    items: list[Any] = list(records)
    items.insert(1800, Crash())
    env = StreamEnvironment(parallelism=2, executor="inprocess",
                            checkpoint=CheckpointConfig(interval=0.01, directory=str(tmp_path / "c")))
    sink = CollectSink()
    # one split: each key's records in one order, so its count windows are known
    env.from_source(ListSource(items, batch_size=20)).map(_paced).key_by(lambda r: r[0]).count_window(
        5).sum(1).sink_to(sink)
    result = env.execute("count windows")
    assert result.restarts == 1 and result.restored_from[-1] is not None
    assert sorted((k, total) for k, _, _, total in sink.committed()) == _count_windows_expected(records, 5)


def test_count_windows_keep_counting_across_a_rescale(tmp_path: Path) -> None:
    """The count of each key and its open window are keyed state: run 1 at parallelism 2 reads
    the first half, run 2 at parallelism 3 the second; windows span the two runs exactly."""
    records = [(f"k{i % 11}", i) for i in range(1500)]
    sinks = []
    for run, (parallelism, part) in enumerate([(2, records[:733]), (3, records[733:])]):
        env = StreamEnvironment(parallelism=parallelism, executor="inprocess",
                                checkpoint=CheckpointConfig(interval=0.05, directory=str(tmp_path / "c")),
                                restart=RestartStrategy.none())
        sink = CollectSink()
        env.from_source(ListSource(part), name=f"src-{run}").key_by(lambda r: r[0]).count_window(
            4, slide=2).sum(1).uid("windows").sink_to(sink, name=f"out-{run}")
        env.execute(f"run-{run}", from_checkpoint="latest" if run else None, allow_non_restored_state=True)
        sinks.append(sink)
    out = sorted((k, end, total) for sink in sinks for k, _, end, total in sink.committed())
    by_key: dict[str, list[int]] = defaultdict(list)
    for k, v in records:
        by_key[k].append(v)
    expected = sorted((k, end, sum(vs[max(0, end - 4):end])) for k, vs in by_key.items()
                      for end in range(2, len(vs) + 1, 2))
    assert out == [(k, float(e), t) for k, e, t in expected]


def test_processing_time_windows_count_every_record_once_across_a_crash(tmp_path: Path) -> None:
    items: list[Any] = list(range(3000))
    items.insert(2600, Crash())
    env = StreamEnvironment(parallelism=2, executor="inprocess",
                            checkpoint=CheckpointConfig(interval=0.01, directory=str(tmp_path / "c")))
    sink = CollectSink()
    env.from_source(ListSource(items, splits=2, batch_size=20)).map(_paced).key_by(lambda x: x % 3).window(
        Tumbling(0.05), time="processing").count().sink_to(sink)
    result = env.execute("processing time")
    assert result.restarts == 1
    out = sink.committed()
    assert sum(n for *_, n in out) == 3000
    assert len(out) > 3, "many windows: the clock cut the stream"
    for _, start, end, _ in out:
        assert end - start == pytest.approx(0.05)


def test_window_all_runs_one_subtask_and_leaves_the_key_out() -> None:
    env = StreamEnvironment(parallelism=3, executor="inprocess")
    sink = CollectSink()
    stream = env.from_source(ListSource([{"t": float(i), "v": i} for i in range(100)], splits=3),
                             watermarks=WatermarkStrategy.for_monotonous_timestamps(timestamp="t"))
    results = stream.window_all(Sliding(20, 10)).sum("v")
    results.sink_to(sink)
    with pytest.raises(GraphError, match="parallelism is 1"):
        results.set_parallelism(2)
    graph = env.job_graph("all")
    (vertex,) = [v for v in graph.vertices if any(s.name == "sum" for s in v.chain)]
    assert vertex.parallelism == 1
    env.execute("all")
    expected = sorted((float(s), float(s + 20), sum(range(max(s, 0), min(s + 20, 100))))
                      for s in range(-10, 100, 10))
    assert sorted(sink.committed()) == expected


def test_early_firings_and_count_triggers_in_a_job() -> None:
    records = [{"k": "a", "t": float(i) / 10, "v": 1} for i in range(100)]
    env = StreamEnvironment(parallelism=1, executor="inprocess")
    early, counted = CollectSink(), CollectSink()
    stream = env.from_source(ListSource(records, batch_size=10),
                             watermarks=WatermarkStrategy.for_monotonous_timestamps(timestamp="t"))
    stream.map(_paced).key_by("k").window(Tumbling(5), trigger=EventTimeTrigger().with_early_firings(
        every=0.001)).sum("v").sink_to(early)
    stream.key_by("k").window(Tumbling(5)).trigger(CountTrigger(10).purging()).sum("v").sink_to(counted)
    env.execute("triggers")
    finals = {(s, e): n for _, s, e, n in early.committed()}
    assert finals == {(0.0, 5.0): 50, (5.0, 10.0): 50}  # the last result of each window: all of it
    assert len(early.committed()) > 2, "partial results before the end"
    assert sorted(counted.committed()) == [("a", 0.0, 5.0, 10)] * 5 + [("a", 5.0, 10.0, 10)] * 5


def test_what_the_api_refuses() -> None:
    env = StreamEnvironment(parallelism=1, executor="inprocess")
    keyed = env.from_source(ListSource([1])).key_by(lambda x: x)
    with pytest.raises(GraphError, match="one Tumbling query"):
        keyed.window(Sliding(10, 5), time="processing", trigger=ProcessingTimeTrigger().purging())
    with pytest.raises(GraphError, match="event-time windows"):
        keyed.window(Tumbling(10), time="processing").allowed_lateness(5)
    with pytest.raises(GraphError, match="needs event-time windows"):
        keyed.window(Tumbling(10), time="processing", trigger=EventTimeTrigger())
    with pytest.raises(GraphError, match="windows need event time"):
        keyed.window(Tumbling(10)).count()
    with pytest.raises(ValueError, match="time"):
        keyed.window(Tumbling(10), time="ingestion")  # type: ignore[arg-type]
    with pytest.raises(GraphError, match="size must be a positive int"):
        keyed.count_window(0)
