"""Smoke tests of the elasticity benchmarks (`elasticity`, `migration`, `recovery`), in-process.

They keep `python -m benchmarks run NAME` runnable between full runs on Spark: the measuring
sink's arithmetic of key-group gaps (across buckets and across writers, as a moved group's output
goes from its old owner to its new one), a short in-process run of `migration`'s moves and
restores, and the figures, targets and plots the report reads.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from benchmarks import elasticity, measuring_sink, migration, recovery, runner  # noqa: E402


def _writer_file(directory: Path, name: str, subtask: int, buckets: dict[int, dict[int, list[float]]]) -> None:
    """A writer's file as `measuring_sink` writes it: a header, then lines per bucket."""
    lines = [{"created": 0.0, "subtask": subtask}]
    for b, groups in buckets.items():
        lines.append({"b": b, "lat": [10, 0.01, 0.05], "g": {}})  # an early line of the bucket, replaced
        lines.append({"b": b, "lat": [10, 0.02 * (b + 1), 0.1], "g": {str(g): v for g, v in groups.items()}})
    (directory / f"out-{name}.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))


def test_gaps_span_buckets_and_writers(tmp_path: Path) -> None:
    # group 5 written by subtask 0 until 1.40, then (moved) by subtask 1 from 1.65; group 7 steady
    # with a 30 ms gap inside a bucket; group 9 by subtask 1 only, silent after 1.1
    _writer_file(tmp_path, "a", 0, {4: {5: [1.00, 1.20, 0.01], 7: [1.00, 1.24, 0.03]},
                                    5: {5: [1.26, 1.40, 0.01], 7: [1.25, 1.49, 0.01]}})
    _writer_file(tmp_path, "b", 1, {4: {9: [1.00, 1.10, 0.005]}, 6: {5: [1.65, 1.74, 0.01]}})
    measured = measuring_sink.read(str(tmp_path))
    assert [(t, n) for t, n, _, _ in measured.latency] == [(1.0, 20), (1.25, 10), (1.5, 10)]
    assert measured.latency[0][2] == 0.1  # the last line of a bucket wins: 0.02 * 5
    gaps = measured.gaps(1.3, 1.7)
    assert gaps[5] == pytest.approx(0.25)  # 1.40 (old owner) to 1.65 (new owner)
    assert gaps[7] == pytest.approx(0.21)  # silent from 1.49 to the window's end
    assert gaps[9] == pytest.approx(0.6)  # silent from 1.10
    ended = measured.gaps(1.3, 1.6, ended=True)  # a steady window: group 5's gap ends after it
    assert ended[5] == pytest.approx(0.01) and ended[9] == 0.0
    assert measured.gaps(1.0, 1.25)[7] == pytest.approx(0.03)  # the gap inside a bucket
    silent = measured.output_after(1.45)
    assert silent[5] == pytest.approx(0.2) and silent[7] == 0.0 and silent[9] is None
    assert measured.groups_of(1, 0.0, 1.5) == {9} and measured.groups_of(0, 0.0, 2.0) == {5, 7}
    series = dict(measured.gap_series())
    assert series[1.5] == pytest.approx(0.25)  # group 5's gap ended at 1.65


def test_writer_measures_each_key_groups_gaps(tmp_path: Path) -> None:
    from epochal.state.keygroups import key_group_of

    start = time.time()
    writer = measuring_sink.MeasuringSink(str(tmp_path), start, 1000.0).create_writer(0, 1)
    a, b = 1, next(k for k in range(2, 100) if key_group_of(k) != key_group_of(1))
    writer.write([(a, 1, 0), (b, 1, 2)])
    time.sleep(0.04)
    writer.write([(b, 1, 4)])
    time.sleep(0.04)
    writer.write([(a, 1, 6), (a, 1, 8)])
    writer.close()
    measured = measuring_sink.load(str(tmp_path), start)
    gaps = measured.gaps(0.0, time.time() - start)
    assert gaps[key_group_of(a)] >= 0.08 and gaps[key_group_of(b)] >= 0.04  # b: silent since its last
    assert measured.output_after(0.0)[key_group_of(a)] < 0.01
    assert sum(n for _, n, _, _ in measured.latency) == 5
    first_bucket = measured.latency[0]  # record x is due at start + x / 2 / 1000: the first batch's worst is x=0's
    assert 0.0 < first_bucket[3] <= first_bucket[2] < 0.2


def test_migration_in_process_moves_and_restores(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(elasticity, "FIRST_CHANGE", 1.5)
    monkeypatch.setattr(elasticity, "SETTLE", 0.7)
    monkeypatch.setattr(elasticity, "CAUGHT_UP", 0.5)
    monkeypatch.setattr(elasticity, "STEADY_FROM", 0.5)
    run = migration.run_once(None, str(tmp_path), 0.5, elasticity.PARALLEL, rate=5_000, load_s=1.0)
    figures = run["figures"]
    labels = [a["label"] for a in figures["after"]]
    assert labels == ["one group", "25 % at once", "25 % at once, back", "25 % in steps", "25 % in steps, back",
                      "2 → 1 by restore"]
    for a in figures["after"]:
        assert a["asked"] < a["done"] < a["done"] + elasticity.SETTLE <= a["settled"] == a["until"] <= run["end"]
        assert a["settled"] < a["done"] + elasticity.SETTLE + 5, a  # caught up: the driver saw recent latency
        assert len(a["group_gaps_s"]) == 128, a["label"]  # every key group has hot keys, and output
        assert a["worst_gap_s"] == pytest.approx(max(a["group_gaps_s"].values()), abs=1e-5)
        assert a["worst_latency_s"] is not None
    assert [a["restores"] for a in figures["after"]] == [False] * 5 + [True]
    assert all(a["attempt"] == a["attempt_before"] for a in figures["after"][:5])  # live: no restart
    assert figures["steady_worst_gap_s"] > 0 and run["latency"] and run["gaps"]
    assert 0.0 <= run["neighbour_cores"] <= os.cpu_count()

    monkeypatch.setattr(runner, "IMAGES", str(tmp_path))
    result = {"rate": 5_000, "blob": migration.BLOB, "step_mb": migration.STEP_MB, "runs": [{**run, "size_mb": 10}]}
    summary = migration._summary(result)
    assert "- 10 MB, at once, there: adds" in summary and "- 10 MB, in steps, back: adds" in summary
    assert "target ≤ 20 ms" in summary and "| 10 MB | " in summary
    assert "Live changes that restarted the job (its attempt changed): 0 of 5 (target: none, met)." in summary
    migration._plot(result)
    elasticity._plot({"runs": [{**run, "load": 0.5, "setup": "x"}]})
    if runner.pyplot() is not None:
        assert (tmp_path / "migration.png").exists() and (tmp_path / "elasticity.png").exists()


def test_recovery_figures_and_summary(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(elasticity, "STEADY_FROM", 0.5)
    monkeypatch.setattr(recovery, "AFTER_KILL", 0.65)  # the files end at 1.99
    # subtask 1 owned group 9 until the kill at 1.3; its output came back at 1.9 on subtask 0
    _writer_file(tmp_path, "a", 0, {4: {5: [1.00, 1.24, 0.01]}, 5: {5: [1.25, 1.49, 0.01]},
                                    7: {5: [1.75, 1.99, 0.01], 9: [1.90, 1.99, 0.01]}})
    _writer_file(tmp_path, "b", 1, {4: {9: [1.00, 1.24, 0.01]}, 5: {9: [1.25, 1.28, 0.01]}})
    kill = recovery.kill_figures(measuring_sink.read(str(tmp_path)), 1.3)
    assert kill["lost_groups"] == 1 and kill["lost_never"] == 0
    assert kill["lost_worst_silent_s"] == pytest.approx(0.6)
    assert kill["worst_gap_s"] == pytest.approx(0.62)  # group 9: 1.28 to 1.90
    assert kill["steady_worst_gap_s"] == pytest.approx(0.01)  # the kill's gap is not the steady run's
    kill.update(scenario="peer backups", replicas=1, recovery_s=[0.4], local_restore_bytes=[2**20], launches=1)
    cost = [{"without": 100.0, "with": 97.0, "ratio": 0.97}, {"without": 100.0, "with": 95.0, "ratio": 0.95}]
    summary = recovery._summary({"rate": 1.0, "size_mb": 100, "kill_at": 1.3, "after_kill_s": 8.0,
                                 "kills": [kill], "cost": cost})
    assert "after 600 ms (met)" in summary
    assert "median ratio 0.960, a cost of 4.0 % (target ≤ 5 %: met)" in summary


def test_the_steady_window_before_a_kill_ends_where_the_kills_bucket_begins() -> None:
    # A kill 0.15 ms into its bucket counted that bucket's 1.1 s latency as steady (run 2026-11-29).
    assert recovery.steady_until(10.00015) == 10.0
    assert recovery.steady_until(10.3) == 10.25
    assert recovery.steady_until(10.25) == 10.25
