"""`runtime.master.metrics_collector.MetricsCollector`: rates, ratios, lags, checkpoint and restart history, from
hand-made task reports (no job runs here)."""

from __future__ import annotations

import math
import time

import pytest

from epochal import StreamEnvironment
from epochal.errors import RecordError
from epochal.plan.job_graph import TaskId
from epochal.runtime.checkpoints import AbortedCheckpoint, AbortReason
from epochal.runtime.master.metrics_collector import MetricsCollector
from epochal.runtime.metrics import CheckpointStatus, TaskMetrics
from epochal.runtime.wire.messages import OperatorMetrics
from epochal.state.manifest import FileHandle, Manifest, OperatorState, SubtaskState, TaskCheckpointStats
from epochal.testing import CollectSink, ListSource


def _job():  # noqa: ANN202
    env = StreamEnvironment(2, executor="inprocess")
    (env.from_source(ListSource([1]), name="src").map(lambda x: x, name="m")
        .key_by(lambda x: x).count(name="c").sink_to(CollectSink(), name="out"))
    return env.job_graph("unit")


def _report(vertex: int, subtask: int, counts: list[tuple[str, int, int]], busy: float = 0.0,
            held: float = 0.0, elapsed: float = 1.0, marks: tuple[float, ...] = (),
            queued: tuple[int, ...] = ()) -> TaskMetrics:
    ops = tuple(OperatorMetrics(name, i, o) for name, i, o in counts)
    return TaskMetrics(TaskId(vertex, subtask), ops, marks, busy, held, elapsed, max(queued, default=0), sum(queued))


def test_operators_sum_their_subtasks_and_rates_come_from_two_snapshots(monkeypatch: pytest.MonkeyPatch) -> None:
    job = _job()
    assert [v.name for v in job.vertices] == ["src -> m", "c -> out"]
    collector = MetricsCollector(job)
    now = [100.0]
    monkeypatch.setattr(time, "monotonic", lambda: now[0])
    first = collector.snapshot([
        _report(0, 0, [("src", 0, 100), ("m", 100, 100)]), _report(0, 1, [("src", 0, 50), ("m", 50, 50)]),
        _report(1, 0, [("c", 60, 60), ("out", 60, 0)]), _report(1, 1, [("c", 40, 40), ("out", 40, 0)]),
    ], attempt=1)
    assert first.operator("m").records_in == 150 and first.operator("out").records_in == 100
    assert (first.records_in, first.records_out) == (150, 100)  # out of the sources, into the sinks
    assert first.in_rate == 0.0  # one snapshot gives no rate
    now[0] = 102.0
    second = collector.snapshot([_report(0, 0, [("src", 0, 300), ("m", 300, 300)])], attempt=1)
    assert second.operator("src").out_rate == pytest.approx((350 - 150) / 2)
    assert second.in_rate == pytest.approx(100.0)
    assert [s.subtask for s in second.operator("c").subtasks] == [0, 1]
    assert len(second.series) == 1 and second.series[0].in_rate == pytest.approx(100.0)


def test_time_ratios_are_over_the_last_interval_and_the_queue_fill_is_against_the_capacity() -> None:
    job = _job()
    collector = MetricsCollector(job)
    collector.snapshot([_report(0, 0, [], busy=1.0, held=0.0, elapsed=2.0)], attempt=1)
    m = collector.snapshot([_report(0, 0, [], busy=1.5, held=2.0, elapsed=4.0, queued=(4, 8))], attempt=1)
    (t,) = [t for t in m.tasks if (t.vertex, t.subtask) == ("src -> m", 0)]
    assert t.busy_ratio == pytest.approx(0.25) and t.backpressured_ratio == pytest.approx(0.75)
    assert t.idle_ratio == pytest.approx(0.0) and t.idle_s == pytest.approx(0.5)
    assert t.input_queued == 12 and t.input_fill == 8 / job.config.channel_capacity
    assert m.operator("m").backpressured_ratio == pytest.approx(0.75)  # the task's load, per operator


def test_the_watermark_is_the_lowest_of_the_subtasks_and_lags_the_wall_clock() -> None:
    collector = MetricsCollector(_job())
    now = time.time()
    m = collector.snapshot([
        _report(1, 0, [("c", 1, 1), ("out", 1, 0)], marks=(now - 30, now - 30)),
        _report(1, 1, [("c", 1, 1), ("out", 1, 0)], marks=(now - 10, math.inf)),
    ], attempt=1)
    c = m.operator("c")
    assert c.watermark == pytest.approx(now - 30) and c.watermark_lag_s == pytest.approx(30, abs=1)
    assert m.operator("src").watermark == -math.inf and m.operator("src").watermark_lag_s is None
    assert m.to_json()["operators"][0]["watermark"] is None  # JSON: no watermark yet


def _manifest(checkpoint_id: int, duration_ms: float, written: int, inherited: int) -> Manifest:
    own = FileHandle(f"chk-{checkpoint_id:08d}/c-0", written, "0" * 64)
    base = FileHandle("chk-00000001/c-0", inherited, "1" * 64)
    keyed = SubtaskState(0, 0, 127, own, None, (base,))
    return Manifest(
        checkpoint_id, "unit", created_at=1000.0, duration_ms=duration_ms,
        operators=(OperatorState("c", 1, 128, (keyed,)),),
        tasks=(TaskCheckpointStats("v1[0]", 5.0, 1.0, 2.0, written), TaskCheckpointStats("v0[0]", 0, 1, 1, 0)),
    )


def test_checkpoints_record_time_size_alignment_and_the_state_per_operator() -> None:
    collector = MetricsCollector(_job())
    collector.checkpoint_completed(_manifest(7, 250.0, written=100, inherited=900))
    collector.checkpoint_aborted(AbortedCheckpoint(8, AbortReason.EXPIRED, "not complete after 10s"))
    m = collector.snapshot([], attempt=1)
    done, aborted = m.checkpoints
    assert (done.checkpoint_id, done.status, done.full_bytes, done.delta_bytes) == (7, CheckpointStatus.COMPLETED,
                                                                                    1000, 100)
    assert done.duration_s == pytest.approx(0.25) and done.triggered_at == pytest.approx(999.75)
    assert done.alignment_s == pytest.approx(0.005)
    assert aborted.status is CheckpointStatus.ABORTED and aborted.reason == "expired: not complete after 10s"
    assert (m.checkpoints_completed, m.checkpoints_aborted) == (1, 1) and m.last_completed == done
    assert m.operator("c").state_bytes == 1000 and m.operator("m").state_bytes is None


def test_restarts_name_the_operator_and_record_and_a_rescaled_job_keeps_its_history() -> None:
    collector = MetricsCollector(_job())
    collector.checkpoint_completed(_manifest(3, 10.0, 1, 1))
    cause = RecordError("m", {"id": 42}, ZeroDivisionError("division by zero"))
    wrapped = RuntimeError("task v0[1] failed")
    wrapped.__cause__ = cause
    collector.attempt_failed(1, wrapped)
    m = collector.snapshot([], attempt=2)
    (restart,) = m.restarts
    assert (restart.attempt, restart.operator, restart.record) == (1, "m", "{'id': 42}")
    assert "ZeroDivisionError" in restart.cause and m.restart_count == 1
    relaunched = MetricsCollector(_job(), previous=m).snapshot([], attempt=3)
    assert relaunched.restarts == m.restarts and relaunched.checkpoints == m.checkpoints
    assert relaunched.uptime_s >= m.uptime_s


def test_final_counts_replace_the_live_ones() -> None:
    collector = MetricsCollector(_job())
    collector.snapshot([_report(1, 0, [("c", 5, 5), ("out", 5, 0)], busy=0.5)], attempt=1)
    final = collector.finished({TaskId(1, 0): (OperatorMetrics("c", 9, 9), OperatorMetrics("out", 9, 0))}, 1)
    assert final.operator("out").records_in == 9
    assert [t.busy_s for t in final.tasks] == [0.5]  # the time spent stays the last reported
