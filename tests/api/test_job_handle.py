"""execute_async: a JobHandle that watches, waits for and cancels a running job, in-process
and through the control endpoint over HTTP."""

from __future__ import annotations

import json
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from epochal import (
    CheckpointConfig,
    JobCancelledError,
    JobFailedError,
    JobState,
    RestartStrategy,
    StreamEnvironment,
)
from epochal.testing import CollectSink, ListSource
from spark_jobs import EndlessSource


def _wait_for(predicate: Any, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def test_a_bounded_job_finishes_and_its_handle_gives_the_result() -> None:
    env = StreamEnvironment(parallelism=2, executor="inprocess")
    sink = CollectSink()
    env.from_source(ListSource(range(100), splits=2)).map(lambda x: x * 2).sink_to(sink)
    handle = env.execute_async("bounded")
    result = handle.result(timeout=30)
    assert result.operator("map").records_out == 100
    assert sorted(sink.committed()) == [x * 2 for x in range(100)]
    status = handle.status()
    assert status.state is JobState.FINISHED and status.parallelism == 2 and status.attempt == 1


def test_cancel_stops_a_running_job_and_result_says_so(tmp_path: Path) -> None:
    env = StreamEnvironment(parallelism=1, executor="inprocess",
                            checkpoint=CheckpointConfig(interval=0.05, directory=str(tmp_path / "c")))
    sink = CollectSink()
    env.from_source(EndlessSource()).map(lambda x: x).sink_to(sink)
    handle = env.execute_async("endless")
    _wait_for(lambda: handle.status().last_checkpoint is not None)
    assert handle.status().state is JobState.RUNNING
    assert handle.cancel()
    with pytest.raises(JobCancelledError, match="endless"):
        handle.result(timeout=30)
    assert handle.status().state is JobState.CANCELLED
    assert not handle.cancel()  # ended: nothing to cancel
    committed = sink.committed()
    assert committed == list(range(len(committed)))  # a prefix, nothing after the last commit


def test_result_times_out_while_the_job_runs() -> None:
    env = StreamEnvironment(parallelism=1, executor="inprocess")
    env.from_source(EndlessSource()).sink_to(CollectSink())
    handle = env.execute_async("endless")
    with pytest.raises(TimeoutError):
        handle.result(timeout=0.2)
    handle.cancel()
    with pytest.raises(JobCancelledError):
        handle.result(timeout=30)


def test_a_failed_job_raises_from_result_and_its_status_says_failed() -> None:
    def boom(x: int) -> int:
        raise ValueError("bad record")

    env = StreamEnvironment(parallelism=1, executor="inprocess", restart=RestartStrategy(max_restarts=1, delay=0))
    env.from_source(ListSource([1, 2, 3])).map(boom).sink_to(CollectSink())
    handle = env.execute_async("failing")
    with pytest.raises(JobFailedError):
        handle.result(timeout=30)
    status = handle.status()
    assert status.state is JobState.FAILED and status.restarts == 1 and len(status.failures) == 2


def test_the_endpoint_serves_status_and_cancels_with_the_token(tmp_path: Path) -> None:
    env = StreamEnvironment(parallelism=1, executor="inprocess", web_port=0)
    env.from_source(EndlessSource()).sink_to(CollectSink())
    handle = env.execute_async("served")
    assert handle.web_url is not None and handle.token
    with urllib.request.urlopen(handle.web_url + "/status", timeout=5) as response:
        body = json.loads(response.read())
    assert body["job"] == "served" and body["state"] in ("created", "running")
    request = urllib.request.Request(handle.web_url + "/cancel", method="POST", data=b"",
                                     headers={"Authorization": f"Bearer {handle.token}"})
    with urllib.request.urlopen(request, timeout=5) as response:
        assert response.status == 202
    with pytest.raises(JobCancelledError):
        handle.result(timeout=30)


def test_a_command_to_a_job_refused_at_its_start_names_why_it_ended(tmp_path: Path) -> None:
    """Issue 40: examples/live_migration.py run twice said "job has ended; nothing to move"; the
    cause (the first run's output, which the sink refused to write over) was hidden."""
    from epochal.connectors import FileSink

    def job() -> StreamEnvironment:
        env = StreamEnvironment(parallelism=1, executor="inprocess")
        env.from_source(ListSource(range(50))).sink_to(FileSink(str(tmp_path / "out")))
        return env

    job().execute("first")
    handle = job().execute_async("second")
    _wait_for(handle.done)
    with pytest.raises(Exception, match=r"job 'second' failed \(EpochalError: FileSink: .* already holds output"):
        handle.move_key_groups({0: 0})
