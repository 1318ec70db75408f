"""What tasks measure, in real in-process jobs: counts equal what was sent, time adds up,
backpressure shows where the output is full, watermarks and late records per operator."""

from __future__ import annotations

import time
from pathlib import Path

from metrics_jobs import bounded_env, finite, word_count

from epochal import StreamEnvironment, WatermarkStrategy
from epochal.cluster.inprocess import InProcessExecutor
from epochal.runtime.master.control import JobControl
from epochal.runtime.metrics import CheckpointStatus, JobMetrics
from epochal.testing import CollectSink, ListSource
from epochal.windows import Tumbling


def _run(env: StreamEnvironment, name: str = "metrics") -> tuple[JobMetrics, object]:
    job = env.job_graph(name)
    control = JobControl(job.name, max(v.parallelism for v in job.vertices))
    result = InProcessExecutor().execute(job, None, control)
    metrics = control.metrics()
    assert metrics is not None
    return metrics, result


def test_the_final_snapshot_counts_every_record_sent_and_equals_the_job_result(tmp_path: Path) -> None:
    n = 3_000
    env = bounded_env(str(tmp_path / "chk"))
    word_count(env, finite(n))
    m, result = _run(env)
    assert (m.records_in, m.records_out) == (n, n)
    for name in ("numbers", "pair", "count", "out"):
        op = m.operator(name)
        expected = result.operator(name)  # type: ignore[attr-defined]
        assert (op.records_in, op.records_out) == (expected.records_in, expected.records_out), name
        assert sum(s.records_in for s in op.subtasks) == op.records_in
    assert m.operator("numbers").records_out == n and m.operator("out").records_in == n
    assert len(m.operator("count").subtasks) == 2
    assert m.checkpoints_completed == len(result.checkpoints) >= 1  # type: ignore[attr-defined]
    assert all(c.status is CheckpointStatus.COMPLETED for c in m.checkpoints)
    assert m.checkpoints[-1].is_final and m.operator("count").state_bytes


def test_time_adds_up_and_a_slow_sink_shows_as_backpressure_upstream() -> None:
    def slow(batch: list[int]) -> list[int]:
        time.sleep(0.004)
        return batch

    env = StreamEnvironment(1, executor="inprocess", batch_size=20, channel_capacity=1)
    (env.from_source(ListSource(list(range(2_000)), batch_size=20), name="numbers")
        .rebalance().map_batches(slow, name="slow").sink_to(CollectSink(), name="out"))
    m, _ = _run(env)
    by_vertex = {t.vertex: t for t in m.tasks}
    source, sink = by_vertex["numbers"], by_vertex["slow -> out"]
    for t in (source, sink):
        assert t.busy_s > 0 and t.busy_s + t.backpressured_s + t.idle_s > 0
        assert 0 <= t.busy_ratio + t.backpressured_ratio + t.idle_ratio <= 1.0 + 1e-9
    assert sink.busy_s > 0.004 * 2_000 / 20 * 0.9  # the sleeps are busy time
    assert source.backpressured_s > 0.5 * sink.busy_s  # the source mostly waited on the slow task
    assert sink.backpressured_s == 0.0  # a sink has no output to fill
    assert m.operator("numbers").backpressured_ratio > m.operator("out").backpressured_ratio


def test_watermarks_and_late_records_per_operator() -> None:
    base = 1_700_000_000.0
    stamps = [base + i for i in range(100)] + [base + 1]  # the last one is late for its window
    env = StreamEnvironment(1, executor="inprocess", batch_size=10)
    (env.from_source(ListSource(stamps, batch_size=10), name="events",
                     watermarks=WatermarkStrategy.bounded_out_of_orderness(0.0, timestamp=lambda t: t))
        .key_by(lambda t: 0).window(Tumbling(10.0)).count(name="per_10s")
        .sink_to(CollectSink(), name="out"))
    m, _ = _run(env, "windows")
    assert m.operator("per_10s").late_records == 1
    assert m.operator("events").watermark >= base + 90  # the source's own, before the input ended
    assert m.operator("per_10s").watermark == float("inf")  # the input ended: end of time
    assert m.operator("per_10s").watermark_lag_s is None


def test_metrics_interval_sets_how_often_live_metrics_come_and_none_gathers_none() -> None:
    from spark_jobs import EndlessSource, wait_until

    def start(interval: float | None) -> object:
        env = StreamEnvironment(parallelism=2, executor="inprocess", metrics_interval=interval)
        env.from_source(EndlessSource()).key_by(lambda x: x % 3).count().sink_to(CollectSink())
        return env.execute_async(f"every-{interval}")

    often, never = start(0.05), start(None)
    try:
        seen: set[float] = set()
        deadline = time.monotonic() + 1.0
        while time.monotonic() < deadline:  # a snapshot every 25 ms: more in a second than the default's 2
            if (m := often.metrics()) is not None:  # type: ignore[attr-defined]
                seen.add(m.taken_at)
            time.sleep(0.005)
        assert len(seen) >= 5
        wait_until(lambda: never.status().state.value == "running", "the job without metrics runs", 30)  # type: ignore[attr-defined]
        time.sleep(0.5)
        assert never.metrics() is None  # type: ignore[attr-defined]
    finally:
        often.cancel(), never.cancel()  # type: ignore[attr-defined]
