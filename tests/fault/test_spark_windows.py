"""Windows under SIGKILL on local Spark (classic and Spark Connect): committed window results
equal a failure-free run's.

The input's disorder stays within the watermark delay, so nothing is late and every window fires
exactly once with its final result, whatever the moment of the kill; the expected output is
computed by the windows' definitions. A kill after a checkpoint completed lands while windows
fire (tumbling windows of 1 s of event time fire all along) and while sessions merge (records
arrive out of order within a session, bridging its parts).
"""

from __future__ import annotations

import math
import random
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from pyspark import cloudpickle

from epochal import CheckpointConfig, RestartStrategy, StreamEnvironment, WatermarkStrategy
from epochal.connectors import FileSink, read_committed
from epochal.testing import ListSource
from epochal.windows import Session, Sliding, Tumbling
from spark_jobs import run_and_kill

pytestmark = [pytest.mark.spark, pytest.mark.fault]
# Spark's Python workers cannot import test modules: ship this one's functions by value.
cloudpickle.register_pickle_by_value(sys.modules[__name__])  # type: ignore[no-untyped-call]

TRIALS = 3
N = 2400


def _records() -> list[tuple[str, float]]:
    """(key, ts): 0.05 s apart; blocks of 4 reversed (disorder 0.15 s); every 40th gap is 3 s long."""
    rows: list[tuple[str, float]] = []
    ts = 0.0
    for i in range(N):
        ts += 3.0 if i % 40 == 39 else 0.05
        rows.append((f"k{i % 6}", round(ts, 2)))
    return [r for start in range(0, N, 4) for r in reversed(rows[start : start + 4])]


def slow(record: tuple[str, float]) -> tuple[str, float]:
    time.sleep(0.002)  # stretch the job over several seconds so that a kill lands mid-stream
    return record


def _expected(records: list[tuple[str, float]]) -> Counter[tuple[Any, ...]]:
    out: Counter[tuple[Any, ...]] = Counter()
    tumbling: Counter[tuple[str, float]] = Counter()
    by_key: dict[str, list[float]] = {}
    for key, ts in records:
        tumbling[(key, math.floor(ts))] += 1
        by_key.setdefault(key, []).append(ts)
    for (key, start), n in tumbling.items():
        out[(key, "t", float(start), float(start) + 1.0, n)] += 1
    for key, times in by_key.items():
        times.sort()
        first = last = times[0]
        count = 0
        for t in times:
            if t > last + 1.0:
                out[(key, "s", first, last + 1.0, count)] += 1
                first, count = t, 0
            last, count = t, count + 1
        out[(key, "s", first, last + 1.0, count)] += 1
    return out


def _env(any_spark: Any, out: str, ckpt: str) -> StreamEnvironment:
    env = StreamEnvironment(
        parallelism=2, executor="spark", spark=any_spark, batch_size=16,
        checkpoint=CheckpointConfig(interval=0.3, directory=ckpt),
        restart=RestartStrategy(max_restarts=3),
    )
    strategy = WatermarkStrategy.bounded_out_of_orderness(0.2, timestamp=1)
    (env.from_source(ListSource(_records(), splits=4, batch_size=16), watermarks=strategy)
        .map(slow)
        .key_by(lambda r: r[0])
        .windows({"t": Tumbling(1.0), "s": Session(1.0)})
        .count()
        .sink_to(FileSink(out)))
    return env


def test_sigkill_while_windows_fire_and_sessions_merge_commits_each_window_once(any_spark: Any, tmp_path: Path) -> None:
    expected = _expected(_records())
    for trial in range(TRIALS):
        out, ckpt = str(tmp_path / f"out{trial}"), str(tmp_path / f"ckpt{trial}")
        result, _ = run_and_kill(any_spark, _env(any_spark, out, ckpt), "windows", ckpt, random.Random(100 + trial),
                                 delay=(0.0, 1.5))
        assert result.restarts == 1, f"trial {trial}: the kill must have caused exactly one relaunch"
        assert result.restored_from[-1] is not None, f"trial {trial}: the kill came after a checkpoint"
        assert Counter(tuple(r) for r in read_committed(out)) == expected, f"trial {trial}"


def _arrow(batch: Any) -> Any:
    import pyarrow as pa

    if isinstance(batch, pa.RecordBatch):  # (key, ts) tuples come as columns f0, f1
        return batch.rename_columns(["k", "ts"])
    return pa.RecordBatch.from_pylist([{"k": k, "ts": ts} for k, ts in batch])


def _expected_columnar(records: list[tuple[str, float]]) -> Counter[tuple[Any, ...]]:
    """Tumbling 1 s and sliding 2 s by 0.5 s counts, by definition (times are multiples of 0.01)."""
    out: Counter[tuple[Any, ...]] = Counter()
    for key, ts in records:
        out[(key, "t", float(math.floor(ts)), float(math.floor(ts)) + 1.0)] += 1
        k = math.floor(ts / 0.5)
        while k * 0.5 + 2.0 > ts:
            out[(key, "s", k * 0.5, k * 0.5 + 2.0)] += 1
            k -= 1
    return Counter({(*window, n): 1 for window, n in out.items()})


def _columnar_env(any_spark: Any, out: str, ckpt: str) -> StreamEnvironment:
    """Arrow batches into periodic windows: the window operator's slice table (columnar mode)."""
    env = StreamEnvironment(
        parallelism=2, executor="spark", spark=any_spark, batch_size=16,
        checkpoint=CheckpointConfig(interval=0.3, directory=ckpt),
        restart=RestartStrategy(max_restarts=3),
    )
    strategy = WatermarkStrategy.bounded_out_of_orderness(0.2, timestamp=1)
    (env.from_source(ListSource(_records(), splits=4, batch_size=16), watermarks=strategy)
        .map(slow)
        .map_batches(_arrow)
        .key_by("k")
        .windows({"t": Tumbling(1.0), "s": Sliding(2.0, 0.5)})
        .count()
        .sink_to(FileSink(out)))
    return env


def _row(record: Any) -> tuple[Any, ...]:
    return tuple(record.values()) if isinstance(record, dict) else tuple(record)


def test_sigkill_while_a_columnar_window_table_fires_commits_each_window_once(any_spark: Any, tmp_path: Path) -> None:
    expected = _expected_columnar(_records())
    for trial in range(TRIALS):
        out, ckpt = str(tmp_path / f"out{trial}"), str(tmp_path / f"ckpt{trial}")
        result, _ = run_and_kill(any_spark, _columnar_env(any_spark, out, ckpt), "columnar windows", ckpt,
                                 random.Random(200 + trial), delay=(0.0, 1.5))
        assert result.restarts == 1, f"trial {trial}: the kill must have caused exactly one relaunch"
        assert result.restored_from[-1] is not None, f"trial {trial}: the kill came after a checkpoint"
        got = Counter(_row(r) for r in read_committed(out))
        assert got == expected, f"trial {trial}: {sorted(set(got) ^ set(expected))[:4]}"
