"""Smoke tests of the benchmarks' core functions: tiny inputs, in-process, no Spark.

They keep the benchmark code runnable between full runs (`python -m benchmarks run NAME`): the
programs compile, count every record, and the results have the structure the report reads.
"""

from __future__ import annotations

import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from benchmarks import abs_eval, abs_target, runner, throughput, workloads  # noqa: E402


def test_generator_source_is_deterministic_and_even():
    source = workloads.GeneratorSource(1000, 3, keys=50)
    splits = source.splits()
    assert [s.end - s.start for s in splits] == [333, 333, 334]
    first = source.open_split(splits[1], None).read(10)
    reader = source.open_split(splits[1], None)
    reader.read(4)
    resumed = source.open_split(splits[1], reader.position()).read(6)
    assert first[4:] == resumed
    assert all(0 <= k < 50 for k, _ in first)


def test_wordcount_measure_structure():
    result = throughput.measure(words=4000, reps=1)
    assert result["ceiling"]["pyarrow"]["words_per_s"] > 0
    assert set(result["paths"]) == {"columnar @p1", "columnar, large batches @p1", "per-record @p1"}
    for r in result["paths"].values():
        assert r["words"] == 4000
        assert r["words_per_s_per_core"] > 0


def test_wordcount_paths_agree_with_ceiling():
    lines = workloads.make_corpus(2000)
    assert workloads.pyarrow_ceiling(lines) == 2000
    assert throughput.run_wordcount(lines, columnar=True, parallelism=2)["words"] == 2000
    assert throughput.run_wordcount(lines, columnar=False, parallelism=2)["words"] == 2000


def test_abs_fig6_structure():
    result = abs_eval.fig6(records=3000, parallelism=2, rounds=1)
    configs = result["configs"]
    assert set(configs) == {"none@None"} | {f"{m}@{i}" for i in abs_eval.INTERVALS for m in ("aligned", "synchronous")}
    assert configs["none@None"]["ratio"] == 1.0
    for c in configs.values():
        assert c["seconds"] > 0 and c["ratio"] > 0


def test_abs_run_once_reads_checkpoint_manifests():
    run = abs_eval.run_once(records=20_000, parallelism=2, mode="aligned", interval=0.01)
    assert run["checkpoints"], "at least the final checkpoint"
    c = run["checkpoints"][-1]
    assert c["final"] and c["size"] > 0 and c["written"] > 0
    assert len(c["alignment_ms"]) == 6  # three aligning vertices of two subtasks each


def test_abs_fig7_and_summary_render(monkeypatch, tmp_path):
    fig7 = abs_eval.fig7(records=2000, parallelisms=[1, 2])
    assert set(fig7["throughput"]) == {"1", "2"}
    fig6 = abs_eval.fig6(records=2000, parallelism=2, rounds=1)
    monkeypatch.setattr(runner, "IMAGES", str(tmp_path))
    result = {"records": 2000, "cores": 2, "hosts": {
        "inprocess": {"host": "in-process", "fig6": fig6, "fig7": fig7},
        "spark": {"host": "spark local[2]", "fig6": fig6, "fig7": fig7},
    }}
    abs_eval._plot(result)
    assert "Fig. 6" in abs_eval._summary(result)
    try:
        import matplotlib  # noqa: F401 - plots need the `bench` extra; the report works without
    except ImportError:
        return
    assert (tmp_path / "abs_fig6.png").exists() and (tmp_path / "abs_fig7.png").exists()


def test_benchmarks_are_registered():
    runner._load()
    assert {"abs_eval", "throughput", "startup_recovery"} <= set(runner._REGISTRY)


def test_abs_target_alternates_and_summarises():
    result = abs_target.alternate(records=2000, rounds=2)
    assert len(result["ratios"]) == 2 and len(result["baseline_seconds"]) == 3
    assert result["ci90_low"] <= result["median"] <= result["ci90_high"]
    # the interval of a median of equal ratios is that ratio; quartiles bracket the median
    same = abs_target.summarise([1.02] * 5)
    assert same["ci90_low"] == same["ci90_high"] == 1.02
    spread = abs_target.summarise([1.0, 1.01, 1.02, 1.03, 1.10])
    assert spread["median"] == 1.02 and spread["q1"] <= 1.02 <= spread["q3"]
    assert 1.0 <= spread["ci90_low"] <= 1.02 <= spread["ci90_high"] <= 1.10


def test_checkpoint_modes_measures_each_mode_under_backpressure():
    from benchmarks import checkpoint_modes

    for mode in checkpoint_modes.MODES:
        run = checkpoint_modes.run_once(20_000, mode, "slow", interval=0.02)  # 0.5 s of sink time: many checkpoints
        assert run["records_per_s"] > 0 and run["checkpoints"], mode
    row = checkpoint_modes._row(run)
    assert row["mode"] == "at_least_once" and row["duration_ms_median"] is not None


def test_migration_figures_and_summary():
    from benchmarks import elasticity, measuring_sink, migration

    # key group 3 goes silent from 8.10 to 8.45 through a move asked at 8.0, done at 8.3
    spans = {3: [measuring_sink.Span(2.0, 8.10, 0.01, 0), measuring_sink.Span(8.45, 12.0, 0.02, 1)],
             4: [measuring_sink.Span(2.0, 12.0, 0.03, 0)]}
    measured = measuring_sink.Measured([(3.0, 10, 0.02, 0.01), (8.25, 10, 0.3, 0.1)], spans)
    changes = [{"label": "25 % at once", "restores": False, "asked": 8.0, "answered": 8.3, "done": 8.3,
                "settled": 11.0}]
    figures = elasticity.figures(measured, changes, 12.0)
    assert figures["steady_worst_latency_s"] == 0.02 and figures["steady_worst_gap_s"] == 0.03
    (after,) = figures["after"]
    assert after["worst_latency_s"] == 0.3 and round(after["added_latency_s"], 3) == 0.28
    assert round(after["worst_gap_s"], 3) == 0.35 and after["worst_gap_group"] == 3
    assert after["groups_over_target"] == 1 and after["until"] == 11.0
    result = {"rate": 1.0, "blob": 1024, "step_mb": 64, "runs": [{"size_mb": 10, "setup": "p2", "figures": figures}]}
    summary = migration._summary(result)
    assert "| 10 MB | p2 | 25 % at once | 20 | 300 | 280 | 30 | 350 | 1 | 300 |" in summary
    assert "- 10 MB, at once, there: adds 280 ms to the worst latency (target ≤ 20 ms: missed)" in summary
