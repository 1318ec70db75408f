"""A job on Spark (classic and Connect) started with execute_async: status, metrics, a savepoint,
a cancel that ends the barrier stage, and a rescale that relaunches it, after which live state
queries reach the workers that own the keys. Under Connect the job
master, and so the handle and the endpoint, live in the client."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from epochal import CheckpointConfig, EpochalError, JobCancelledError, JobState, StreamEnvironment
from epochal.connectors import FileSink, read_committed
from epochal.state.savepoints import load_savepoint
from spark_jobs import EndlessSource, wait_until

pytestmark = pytest.mark.spark


def test_savepoint_then_cancel_through_the_endpoint_ends_the_stage_and_keeps_the_committed_prefix(
    any_spark: Any, spark: Any, tmp_path: Path
) -> None:
    env = StreamEnvironment(parallelism=2, executor="spark", spark=any_spark, web_port=0,
                            checkpoint=CheckpointConfig(interval=0.2, directory=str(tmp_path / "c")))
    env.from_source(EndlessSource()).map(lambda x: x).sink_to(FileSink(str(tmp_path / "out")))
    handle = env.execute_async("endless-on-spark")
    wait_until(lambda: (handle.status().last_checkpoint or 0) >= 2, "two checkpoints", timeout=120)
    with urllib.request.urlopen(handle.web_url + "/status", timeout=5) as response:
        assert json.loads(response.read())["state"] == "running"
    wait_until(lambda: handle.metrics() is not None, "the workers' first metrics", timeout=30)
    saved = handle.savepoint(str(tmp_path / "savepoint"), timeout=120)
    manifest = load_savepoint(saved)
    assert manifest is not None and manifest.checkpoint_id > 2  # a new checkpoint, not a copy of the last
    request = urllib.request.Request(handle.web_url + "/cancel", method="POST", data=b"",
                                     headers={"Authorization": f"Bearer {handle.token}"})
    with urllib.request.urlopen(request, timeout=5) as response:
        assert response.status == 202
    with pytest.raises(JobCancelledError):
        handle.result(timeout=120)
    assert handle.status().state is JobState.CANCELLED
    # the barrier stage is gone (asked of the classic session: the Connect server's driver is its driver)
    assert not spark.sparkContext.statusTracker().getActiveJobsIds()
    committed = sorted(read_committed(str(tmp_path / "out")))
    assert committed == list(range(len(committed))) and committed  # a prefix, once each


def test_rescale_on_spark_relaunches_the_stage_and_commits_each_record_once(any_spark: Any, tmp_path: Path) -> None:
    env = StreamEnvironment(parallelism=1, executor="spark", spark=any_spark,
                            checkpoint=CheckpointConfig(interval=0.2, directory=str(tmp_path / "c")))
    env.from_source(EndlessSource()).key_by(lambda x: x % 5).count().uid("counts").sink_to(
        FileSink(str(tmp_path / "out")))
    handle = env.execute_async("rescaled-on-spark")
    wait_until(lambda: (handle.status().last_checkpoint or 0) >= 2, "two checkpoints", timeout=120)
    rescaled_from = handle.rescale(2, timeout=120)
    wait_until(lambda: handle.status().state is JobState.RUNNING and handle.status().parallelism == 2
               and (handle.status().last_checkpoint or 0) >= rescaled_from + 2, "running at 2", timeout=120)
    # live queries go to the worker that owns the key now: both subtasks answer, ahead of the checkpoint
    for key in range(5):
        committed = handle.query_state("counts", key)["count"]
        assert handle.query_state("counts", key, live=True, timeout=30)["count"] >= committed > 0
    handle.cancel()
    with pytest.raises(JobCancelledError):
        handle.result(timeout=120)
    updates = [tuple(u) for u in read_committed(str(tmp_path / "out"))]
    per_key: dict[int, list[int]] = {}
    for key, count in updates:
        per_key.setdefault(key, []).append(count)
    assert per_key and all(sorted(c) == list(range(1, len(c) + 1)) for c in per_key.values())  # once each
    assert any(max(c) > 100 for c in per_key.values())  # it ran on after the rescale


def test_a_rescale_beyond_the_clusters_slots_is_refused_and_the_job_runs_on(spark: Any, tmp_path: Path) -> None:
    env = StreamEnvironment(parallelism=1, executor="spark", spark=spark,
                            checkpoint=CheckpointConfig(interval=0.2, directory=str(tmp_path / "c")))
    env.from_source(EndlessSource()).sink_to(FileSink(str(tmp_path / "out")))
    handle = env.execute_async("too-big")
    wait_until(lambda: handle.status().state is JobState.RUNNING, "running", timeout=120)
    with pytest.raises(EpochalError, match="task slots"):
        handle.rescale(64, timeout=60)
    assert handle.status().state is JobState.RUNNING and handle.status().parallelism == 1
    handle.cancel()
    with pytest.raises(JobCancelledError):
        handle.result(timeout=120)


def test_a_rescale_into_standby_slots_is_live_in_the_running_stage_and_commits_each_record_once(
    spark: Any, tmp_path: Path
) -> None:
    env = StreamEnvironment(parallelism=1, max_workers=2, executor="spark", spark=spark,
                            checkpoint=CheckpointConfig(interval=0.2, directory=str(tmp_path / "c")))
    env.from_source(EndlessSource()).key_by(lambda x: x % 5).count().uid("counts").sink_to(
        FileSink(str(tmp_path / "out")))
    handle = env.execute_async("standby-slots")
    wait_until(lambda: (handle.status().last_checkpoint or 0) >= 2, "two checkpoints", timeout=120)
    stage = set(spark.sparkContext.statusTracker().getActiveJobsIds())
    assert len(stage) == 1
    for parallelism in (2, 1, 2):
        rescaled_from = handle.rescale(parallelism, timeout=120)
        wait_until(lambda p=parallelism, r=rescaled_from: handle.status().state is JobState.RUNNING
                   and handle.status().parallelism == p and (handle.status().last_checkpoint or 0) >= r + 2,
                   f"running at {parallelism}", timeout=120)
        # the same Spark job: the standby worker took key groups, no stage was launched
        assert set(spark.sparkContext.statusTracker().getActiveJobsIds()) == stage
        assert handle.status().attempt == 1  # live: no task restarted
    for key in range(5):
        assert handle.query_state("counts", key, live=True, timeout=30)["count"] > 0
    handle.cancel()
    with pytest.raises(JobCancelledError):
        handle.result(timeout=120)
    per_key: dict[int, list[int]] = {}
    for key, count in (tuple(u) for u in read_committed(str(tmp_path / "out"))):
        per_key.setdefault(key, []).append(count)
    assert len(per_key) == 5 and all(sorted(c) == list(range(1, len(c) + 1)) for c in per_key.values())


def test_max_workers_below_the_parallelism_is_refused() -> None:
    with pytest.raises(ValueError, match="max_workers"):
        StreamEnvironment(parallelism=3, max_workers=2)
