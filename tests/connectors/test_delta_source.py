"""DeltaSource: a Delta table at a pinned version, a row group per split, partition columns
filled in; a job over it counts every row once through a crash."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from test_file_formats import read_all

from epochal import CheckpointConfig, RestartStrategy, StreamEnvironment
from epochal.cluster.inprocess import InProcessExecutor
from epochal.connectors import DeltaSource
from epochal.errors import InjectedFailure
from epochal.testing import CollectSink

deltalake = pytest.importorskip("deltalake")


def _rows(start: int, n: int) -> pa.Table:
    ids = list(range(start, start + n))
    return pa.table({"id": ids, "amount": [i % 17 for i in ids], "region": [f"r{i % 3}" for i in ids]})


def test_a_delta_table_is_read_at_the_version_pinned_when_the_source_was_made(tmp_path: Path) -> None:
    path = str(tmp_path / "table")
    deltalake.write_deltalake(path, _rows(0, 500), partition_by=["region"])
    deltalake.write_deltalake(path, _rows(500, 300), partition_by=["region"], mode="append")
    source = DeltaSource(path)
    deltalake.write_deltalake(path, _rows(800, 100), partition_by=["region"], mode="append")  # after: not read
    assert source.version == 1
    rows = read_all(source, batch=50)
    assert sorted(r["id"] for r in rows) == list(range(800))
    assert all(r["region"] == f"r{r['id'] % 3}" and r["amount"] == r["id"] % 17 for r in rows)
    assert sorted(r["id"] for r in read_all(source, batch=33, reopen=True)) == list(range(800))
    assert sorted(r["id"] for r in read_all(DeltaSource(path, version=0))) == list(range(500))
    assert [sorted(r) for r in read_all(DeltaSource(path, columns=["id"]))][:1] == [["id"]]


def test_a_job_over_a_delta_table_counts_every_row_once_through_a_crash(tmp_path: Path) -> None:
    path = str(tmp_path / "table")
    for i in range(4):  # several files, so several splits
        deltalake.write_deltalake(path, _rows(i * 250, 250), mode="append")
    crashed: list[int] = []

    def check(row: tuple[Any, ...]) -> tuple[Any, ...]:
        if row[0] == 600 and not crashed:
            crashed.append(1)
            raise InjectedFailure("crash")
        return row

    env = StreamEnvironment(
        parallelism=2,
        checkpoint=CheckpointConfig(interval=0.05, directory=str(tmp_path / "ckpt")),
        restart=RestartStrategy(max_restarts=2, delay=0.0),
    )
    sink = CollectSink()
    env.from_source(DeltaSource(path)).map(check).map(lambda r: r[0]).sink_to(sink)
    result = InProcessExecutor(seed=3, virtual_time=True).execute(env.job_graph("delta-in"))
    assert result.restarts == 1 and crashed
    assert sorted(sink.committed()) == list(range(1000))
