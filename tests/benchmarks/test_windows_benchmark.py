"""Smoke tests of the `windows` benchmark: tiny data, in-process only (no Spark), a few seconds.

They keep `python -m benchmarks run windows` runnable between full runs: the files are read back
in order and resume at a position, the buckets baseline agrees with Epochal's windows, and the
rows, verdicts, table and plots have the structure the report reads.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from benchmarks import runner  # noqa: E402
from benchmarks import windows as w  # noqa: E402


def test_files_source_reads_in_order_and_resumes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(w, "FILE_ROWS", 700)  # several files, batches across their edges
    paths = w.make_data(str(tmp_path), 2000, w.OUT_OF_ORDER, keys=10)
    assert len(paths) == 3
    source = w.ParquetFilesSource(paths)
    split = source.splits()[0]
    reader: Any = source.open_split(split, None)
    seen: list[Any] = []
    while (batch := reader.read(300)) is not None:
        seen += batch.column("ts").to_pylist()
    assert len(seen) == 2000 and reader.position() == 2000
    resumed: Any = source.open_split(split, 1234).read(100)
    assert resumed is not None and resumed.column("ts").to_pylist() == seen[1234:1334]
    limited: Any = w.ParquetFilesSource(paths, limit=50).open_split(split, None)
    assert limited.read(300).num_rows == 50 and limited.read(300) is None
    # 20 % out of order, none by the watermark delay or more
    ahead = max(seen[0], seen[1])
    for ts in seen[2:]:
        assert ts > ahead - w.DELAY
        ahead = max(ahead, ts)
    assert sorted(seen) != seen


def test_buckets_agree_with_slicing(tmp_path: Path) -> None:
    checked = w.check_agreement(str(tmp_path), records=3000, keys=5, rate=50.0)
    assert len(checked) == 6 and all(n > 0 for n in checked.values())


def test_buckets_count_every_window_of_a_record() -> None:
    fn = w.WindowBuckets([(10.0, 5.0), (4.0, 4.0)])

    class Ctx:
        key = "a"
        registered: list[float] = []

        class timers:  # noqa: N801 - stands for ctx.timers
            @staticmethod
            def register_event_time(ts: float) -> None:
                Ctx.registered.append(ts)

        @staticmethod
        def current_watermark() -> float:
            return float("-inf")

        @staticmethod
        def map_state(name: str) -> Any:
            class Map(dict[Any, Any]):
                def put(self, k: Any, v: Any) -> None:
                    self[k] = v

                def remove(self, k: Any) -> None:
                    del self[k]

            return Map()

    ctx: Any = Ctx()
    fn.open(ctx)
    fn.process_element(("a", 7.0, 1), ctx)
    assert sorted(Ctx.registered) == [8.0, 10.0, 15.0]  # [0, 10), [5, 15) and [4, 8)
    assert list(fn.on_timer(10.0, ctx)) == [("a", "q0", 0.0, 10.0, 1)]
    assert list(fn.on_timer(8.0, ctx)) == [("a", "q1", 4.0, 8.0, 1)]


def test_measure_report_and_plots(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(w, "BUCKET_BUDGET", 300_000)  # the 100-query row reads a prefix
    monkeypatch.setattr(w, "BUCKET_STEP", 100)
    chosen = [x for x in w.workloads() if x.name in ("60 s / 60 s", "60 s / 5 s", "1 queries", "100 queries")]
    result = w.measure(3000, str(tmp_path / "data"), spark=False, chosen=chosen, sample=1000)
    rows = result["rows"]
    assert len(rows) == 8
    for row in rows:
        assert row["slicing"]["records"] == 3000 and row["slicing"]["results"] > 0
        assert row["slicing"]["checkpoints"] >= 1
        assert row["buckets"]["records"] == w.bucket_records(next(x for x in chosen if x.name == row["workload"]), 3000)
    hundred = [r for r in rows if r["workload"] == "100 queries"]
    assert all(r["buckets"]["records"] < 3000 and r["slicing_prefix"]["records"] == r["buckets"]["records"]
               and r["slicing_prefix"]["results"] == r["buckets"]["results"] for r in hundred)
    # Spark's columns, as the child process would fill them
    for i, row in enumerate(rows):
        row["spark"] = {"records": 3000, "seconds": 1.0, "finished": i != 1,
                        "records_per_s": 3000.0 if i != 1 else None, "batches": 1, "input_rows": 3000}
    monkeypatch.setattr(runner, "IMAGES", str(tmp_path / "img"))
    w._plot(result)
    summary = w._summary(result)
    assert "| 100 queries |" in summary and "stopped after 1 s" in summary
    verdicts = w.verdicts(result)
    assert len(verdicts) == 5 and "Spark" in verdicts[-1]
    try:
        import matplotlib  # noqa: F401 - plots need the `bench` extra; the report works without
    except ImportError:
        return
    assert (tmp_path / "img" / "windows_slide.png").exists() and (tmp_path / "img" / "windows_queries.png").exists()


def test_windows_benchmark_is_registered() -> None:
    runner._load()
    assert "windows" in runner._REGISTRY
