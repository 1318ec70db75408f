"""Views straight over sources (`env.create_view(name, source)`): a Parquet or Delta source is
read with watermarks per split, and its own schema is the view's when none is given."""

from __future__ import annotations

import datetime as dt
import os
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from epochal import StreamEnvironment, WatermarkStrategy
from epochal.connectors import DeltaSource, ParquetSource
from epochal.sql import SqlError
from epochal.testing import CollectSink, ListSource

START = dt.datetime(2024, 1, 1)
QUERY = ("SELECT user, window.start AS s, count(*) AS n, sum(ms) AS total FROM clicks "
         "GROUP BY user, window(ts, '6 seconds')")
EXPECTED = [("u0", 0, 2, 3), ("u0", 6, 2, 15), ("u1", 0, 2, 5), ("u1", 6, 2, 17), ("u2", 0, 2, 7), ("u2", 6, 2, 19)]


def _clicks() -> pa.Table:
    return pa.table({"user": [f"u{i % 3}" for i in range(12)], "ms": list(range(12)),
                     "ts": pa.array([START + dt.timedelta(seconds=i) for i in range(12)], pa.timestamp("us"))})


def _run(env: StreamEnvironment) -> list[tuple[Any, ...]]:
    sink = CollectSink()
    env.sql(QUERY).sink_to(sink)
    env.execute("clicks")
    return sorted((u, s.second, n, total) for u, s, n, total in sink.committed())


def test_a_view_over_a_parquet_source_takes_its_schema_and_its_watermarks_per_split(tmp_path: Path) -> None:
    pq.write_table(_clicks(), os.path.join(tmp_path, "part-0.parquet"), row_group_size=4)  # 3 splits
    env = StreamEnvironment(parallelism=2, executor="inprocess")
    env.create_view("clicks", ParquetSource(str(tmp_path), in_order=True), event_time="ts")
    assert "view-clicks" in env.explain("SELECT user FROM clicks")  # the source itself, no watermark operator
    assert "watermarks" not in env.explain("SELECT user FROM clicks")
    assert _run(env) == EXPECTED


def test_a_view_over_a_delta_source(tmp_path: Path) -> None:
    from deltalake import write_deltalake

    write_deltalake(str(tmp_path / "clicks"), _clicks())
    env = StreamEnvironment(parallelism=2, executor="inprocess")
    env.create_view("clicks", DeltaSource(str(tmp_path / "clicks")), event_time="ts")
    assert _run(env) == EXPECTED


def test_a_stream_from_a_source_keeps_its_watermarks_and_lends_its_schema(tmp_path: Path) -> None:
    pq.write_table(_clicks(), os.path.join(tmp_path, "part-0.parquet"), row_group_size=4)
    env = StreamEnvironment(parallelism=2, executor="inprocess")
    stream = env.from_source(ParquetSource(str(tmp_path), columns=["user", "ms", "ts"]), name="files",
                             watermarks=WatermarkStrategy.bounded_out_of_orderness(0.0, timestamp="ts"))
    env.create_view("clicks", stream, event_time="ts")
    assert _run(env) == EXPECTED


def test_a_stream_without_a_schema_of_its_own_needs_one() -> None:
    env = StreamEnvironment(parallelism=2, executor="inprocess")
    with pytest.raises(SqlError, match="give schema="):
        env.create_view("clicks", env.from_source(ListSource([{"user": "u0"}])))
