"""A SQL job under SIGKILL on local Spark: its committed rows equal the query's answer, each once.

The query (`env.sql`) is a windowed GROUP BY with several aggregates: a window operator per
aggregate (columnar slice tables, and count(DISTINCT) as a merging aggregate), the parts joined
per key and window in keyed state with event-time timers, then the SELECT list. Every operator's
uid is derived from the query, so the relaunched attempt restores each one's state. The input's
disorder stays within the view's watermark delay: every window fires once with its final row.
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

from epochal import CheckpointConfig, RestartStrategy, StreamEnvironment
from epochal.connectors import FileSink, read_committed
from epochal.testing import ListSource
from spark_jobs import run_and_kill

pytestmark = [pytest.mark.spark, pytest.mark.fault]
cloudpickle.register_pickle_by_value(sys.modules[__name__])  # type: ignore[no-untyped-call]

TRIALS = 2
N = 2400
QUERY = """
SELECT k, window.start AS ws, window.end AS we, count(*) AS n, sum(v) AS s, max(v) AS top,
       count(DISTINCT v % 3) AS kinds
FROM t
GROUP BY k, window(ts, '1 second')
"""


def _records() -> list[dict[str, Any]]:
    """0.05 s apart, blocks of 4 reversed (disorder 0.15 s), every 40th gap 3 s long."""
    rows: list[dict[str, Any]] = []
    ts = 0.0
    for i in range(N):
        ts += 3.0 if i % 40 == 39 else 0.05
        rows.append({"k": f"k{i % 6}", "v": i % 17, "ts": round(ts, 2)})
    return [r for start in range(0, N, 4) for r in reversed(rows[start : start + 4])]


def slow(record: dict[str, Any]) -> dict[str, Any]:
    time.sleep(0.002)  # stretch the job over several seconds so that a kill lands mid-stream
    return record


def _expected() -> Counter[tuple[Any, ...]]:
    windows: dict[tuple[str, float], list[int]] = {}
    for r in _records():
        windows.setdefault((r["k"], float(math.floor(r["ts"]))), []).append(r["v"])
    return Counter((k, start, start + 1.0, len(vs), sum(vs), max(vs), len({v % 3 for v in vs}))
                   for (k, start), vs in windows.items())


def _env(spark: Any, out: str, ckpt: str) -> StreamEnvironment:
    env = StreamEnvironment(parallelism=2, executor="spark", spark=spark, batch_size=16,
                            checkpoint=CheckpointConfig(interval=0.3, directory=ckpt),
                            restart=RestartStrategy(max_restarts=3))
    rows = env.from_source(ListSource(_records(), splits=4, batch_size=16)).map(slow)
    env.create_view("t", rows, schema="k STRING, v BIGINT, ts DOUBLE", event_time="ts", watermark_delay=0.2)
    env.sql(QUERY).sink_to(FileSink(out))
    return env


def _row(record: Any) -> tuple[Any, ...]:
    return tuple(record.values()) if isinstance(record, dict) else tuple(record)


def test_sigkill_of_a_sql_job_commits_each_window_row_once(spark: Any, tmp_path: Path) -> None:
    expected = _expected()
    for trial in range(TRIALS):
        out, ckpt = str(tmp_path / f"out{trial}"), str(tmp_path / f"ckpt{trial}")
        result, _ = run_and_kill(spark, _env(spark, out, ckpt), "sql", ckpt, random.Random(300 + trial),
                                 delay=(0.0, 1.5))
        assert result.restarts == 1, f"trial {trial}: the kill must have caused exactly one relaunch"
        assert result.restored_from[-1] is not None, f"trial {trial}: the kill came after a checkpoint"
        got = Counter(_row(r) for r in read_committed(out))
        assert got == expected, f"trial {trial}: {sorted(set(got) ^ set(expected))[:4]}"
