"""Smoke tests of the `nexmark` benchmark: tiny event counts, in-process only unless marked spark.

They keep `python -m benchmarks run nexmark` runnable between full runs: every query in
examples/nexmark/ loads by file path and runs, the Parquet files Spark SS reads hold the same
events, and the JSON, verdicts, table and plot have the structure the report reads.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from benchmarks import nexmark as n  # noqa: E402
from benchmarks import runner  # noqa: E402
from epochal.connectors.nexmark import NexmarkSource, bids  # noqa: E402

EVENTS = 20_000


def test_every_query_loads_with_its_contract() -> None:
    files = n.query_files()
    assert [name for name, _ in files][:3] == ["q0", "q1", "q2"]
    for name, path in files:
        module = n.load_query(path)
        assert module.NAME == name and isinstance(module.DESCRIPTION, str) and callable(module.query)


def test_files_hold_the_source_events_flat(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(n, "FILE_EVENTS", 3000)
    paths = n.write_events(str(tmp_path), 7000)
    assert len(paths) == 3
    table = pq.read_table(str(tmp_path))
    assert table.num_rows == 7000
    assert {"kind", "dateTime", "p_id", "p_state", "a_id", "a_expires", "a_seller", "b_auction", "b_price",
            "b_channel"} <= set(table.column_names)
    assert not any(str(t).startswith("dictionary") for t in table.schema.types)  # Spark reads plain strings
    events = NexmarkSource(events=7000, seed=n.SEED).slots(0, 7000)
    bid = bids(events)
    flat_bids = table.filter(table.column("kind").to_numpy() == 2)
    assert flat_bids.column("b_price").to_pylist() == bid.column("price").to_pylist()
    assert flat_bids.column("b_channel").to_pylist() == bid.column("channel").cast("string").to_pylist()
    assert table.column("dateTime").to_pylist() == events.column("dateTime").to_pylist()


def _fake_spark_columns(rows: list[dict[str, Any]]) -> None:
    """Spark's columns as the child process fills them: ran, not expressible, stopped, failed."""
    for i, row in enumerate(rows):
        row["epochal_spark"] = {**row["epochal"], "workers": 2, "startup_s": 1.5,
                                "events_per_s_per_core": row["epochal"]["events_per_s"] / 2}
        cases: list[dict[str, Any]] = [
            {"expressible": True, "finished": True, "seconds": 1.0, "events": EVENTS, "input_rows": EVENTS,
             "results": 10, "batches": 1, "output_mode": "append", "events_per_s": 2e4,
             "events_per_s_per_core": 1e4},
            {"expressible": False, "reason": "no such window", "spark_error": "AnalysisException: no"},
            {"expressible": True, "finished": False, "seconds": 600.0, "events": EVENTS, "input_rows": 5,
             "results": 0, "batches": 1, "output_mode": "append", "events_per_s": None,
             "events_per_s_per_core": None},
            {"error": "RuntimeError: boom"},
        ]
        row["spark_ss"] = cases[i % len(cases)]


def test_measure_report_and_plot(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    result = n.measure(EVENTS, str(tmp_path / "data"), spark=False, profile_events=3000)
    names = [name for name, _ in n.query_files()]
    assert [r["query"] for r in result["rows"]] == names
    for row in result["rows"]:
        mine = row["epochal"]
        assert mine["events"] == EVENTS, row["query"]  # the query ran over every event
        assert mine["events_per_s"] > 0 and mine["checkpoints"] >= 1 and mine["workers"] == 1
        assert not mine["cpu_s"] or mine["events_per_cpu_s"] > 0  # a tiny run may use under a clock tick
        assert row["flink_13"] == n.FLINK_13.get(row["query"])
        if os.path.exists(os.path.join(n.QUERIES_DIR, "sql", f"{row['query']}.py")):  # its SQL version ran too
            assert row["epochal_sql"]["events"] == EVENTS and row["epochal_sql"]["results"] == mine["results"]
        if "profile" in row:
            assert row["profile"]["functions"] and abs(sum(row["profile"]["areas"].values()) - 1) < 0.05
    _fake_spark_columns(result["rows"])
    json.loads(json.dumps(result))  # the runner writes it as JSON
    monkeypatch.setattr(runner, "IMAGES", str(tmp_path / "img"))
    n._plot(result)
    summary = n._summary(result)
    assert all(f"| {name} |" in summary for name in names)
    assert "not expressible in Spark SS" in summary and "stopped after 600 s" in summary
    assert "Per CPU-second used" in summary
    assert "q11" not in names or "The queries in SQL" in summary
    assert len(names) < 4 or "on Spark SS failed: `RuntimeError: boom`" in summary
    verdicts = n.verdicts(result)
    assert len(verdicts) == 3 and "Flink 1.13" in verdicts[0] and "Spark SS" in verdicts[2]
    try:
        import matplotlib  # noqa: F401 - plots need the `bench` extra; the report works without
    except ImportError:
        return
    assert (tmp_path / "img" / "nexmark.png").exists()


def test_profile_says_where_the_time_goes() -> None:
    q0 = n.load_query(dict(n.query_files())["q0"])
    found = n.profile_epochal(q0, 3000, top=5)
    assert len(found["functions"]) == 5 and found["profiled_s"] > 0
    assert abs(sum(found["areas"].values()) - 1) < 0.05
    assert any(area.startswith("generator") for area in found["areas"])


def test_cpu_seconds_count_this_process() -> None:
    before = n.cpu_seconds()
    if before is None:
        pytest.skip("no /proc")
    spin = time.process_time() + 0.3
    while time.process_time() < spin:
        pass
    used = (n.cpu_seconds() or 0.0) - before
    assert 0.2 <= used < 5.0


def test_shortfalls_name_the_missed_targets() -> None:
    def row(mine: float) -> dict[str, Any]:
        return {"flink_13": 100.0, "epochal": {"events_per_s_per_core": mine},
                "spark_ss": {"events_per_s_per_core": 20.0}}

    assert n.shortfalls(row(90.0)) == ["Flink 1.13", "5x Spark SS"]
    assert n.shortfalls(row(120.0)) == []


def test_nexmark_benchmark_is_registered() -> None:
    assert "benchmarks.nexmark" in runner._MODULES  # `python -m benchmarks` loads it
    runner._load()
    assert "nexmark" in runner._REGISTRY


@pytest.mark.spark
def test_spark_columns(tmp_path: Path) -> None:
    result = n.measure(EVENTS, str(tmp_path), only=["q0"])  # one query: the columns, not the queries (CI time)
    assert "spark_error" not in result, result.get("spark_error")
    for row in result["rows"]:
        assert row["epochal_spark"]["events"] == EVENTS and row["epochal_spark"]["startup_s"] > 0
        ss = row["spark_ss"]
        assert ss["expressible"] and ss["finished"] and ss["input_rows"] >= EVENTS, ss
        assert ss["cpu_s"] > 0 and row["epochal_spark"]["cpu_s"] > 0  # the JVM and workers are counted
