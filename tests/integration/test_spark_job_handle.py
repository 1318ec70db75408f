"""A job on Spark started with execute_async: status, and a cancel that ends the barrier stage."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from epochal import CheckpointConfig, JobCancelledError, JobState, StreamEnvironment
from epochal.connectors import FileSink, read_committed
from spark_jobs import EndlessSource, wait_until

pytestmark = pytest.mark.spark


def test_cancel_through_the_endpoint_ends_the_stage_and_keeps_the_committed_prefix(
    spark: Any, tmp_path: Path
) -> None:
    env = StreamEnvironment(parallelism=2, executor="spark", spark=spark, web_port=0,
                            checkpoint=CheckpointConfig(interval=0.2, directory=str(tmp_path / "c")))
    env.from_source(EndlessSource()).map(lambda x: x).sink_to(FileSink(str(tmp_path / "out")))
    handle = env.execute_async("endless-on-spark")
    wait_until(lambda: (handle.status().last_checkpoint or 0) >= 2, "two checkpoints", timeout=120)
    with urllib.request.urlopen(handle.web_url + "/status", timeout=5) as response:
        assert json.loads(response.read())["state"] == "running"
    request = urllib.request.Request(handle.web_url + "/cancel", method="POST", data=b"",
                                     headers={"Authorization": f"Bearer {handle.token}"})
    with urllib.request.urlopen(request, timeout=5) as response:
        assert response.status == 202
    with pytest.raises(JobCancelledError):
        handle.result(timeout=120)
    assert handle.status().state is JobState.CANCELLED
    assert not spark.sparkContext.statusTracker().getActiveJobsIds()  # the barrier stage is gone
    committed = sorted(read_committed(str(tmp_path / "out")))
    assert committed == list(range(len(committed))) and committed  # a prefix, once each


def test_rescale_on_spark_relaunches_the_stage_and_commits_each_record_once(spark: Any, tmp_path: Path) -> None:
    env = StreamEnvironment(parallelism=1, executor="spark", spark=spark,
                            checkpoint=CheckpointConfig(interval=0.2, directory=str(tmp_path / "c")))
    env.from_source(EndlessSource()).key_by(lambda x: x % 5).count().sink_to(FileSink(str(tmp_path / "out")))
    handle = env.execute_async("rescaled-on-spark")
    wait_until(lambda: (handle.status().last_checkpoint or 0) >= 2, "two checkpoints", timeout=120)
    rescaled_from = handle.rescale(2, timeout=120)
    wait_until(lambda: handle.status().state is JobState.RUNNING and handle.status().parallelism == 2
               and (handle.status().last_checkpoint or 0) >= rescaled_from + 2, "running at 2", timeout=120)
    handle.cancel()
    with pytest.raises(JobCancelledError):
        handle.result(timeout=120)
    updates = [tuple(u) for u in read_committed(str(tmp_path / "out"))]
    per_key: dict[int, list[int]] = {}
    for key, count in updates:
        per_key.setdefault(key, []).append(count)
    assert per_key and all(sorted(c) == list(range(1, len(c) + 1)) for c in per_key.values())  # once each
    assert any(max(c) > 100 for c in per_key.values())  # it ran on after the rescale
