"""Smoke tests of the joins benchmark (`benchmarks/joins.py`): tiny inputs, in process, no Spark.
The window join on slices and the per-window join emit the same pairs; the interval join reads
the Nexmark Parquet files and reports its results and the state it held."""

from __future__ import annotations

import os
import sys
from pathlib import Path

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from benchmarks import joins, nexmark  # noqa: E402


def test_both_window_joins_emit_the_same_pairs_and_report_their_state() -> None:
    assert joins._same_pairs(2.0)
    left, right = joins._records(3_000, "l", 1), joins._records(1_000, "r", 2)
    for kind in ("slices", "per_window"):
        run = joins._run_window(kind, left, right, 5.0)
        assert run["pairs"] > 0 and run["records_per_s"] > 0 and run["checkpoints"] >= 1


def test_the_interval_join_reads_the_event_files_and_reports_what_it_held(tmp_path: Path) -> None:
    nexmark.write_events(str(tmp_path), 30_000)
    run = joins.epochal_interval(str(tmp_path), 30_000)
    assert run["results"] > 1_000 and run["events_per_s"] > 0
    assert run["max_checkpoint_bytes"] > 0 and run["rows_held_at_peak"] >= 0
