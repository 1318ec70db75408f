"""Key groups of two-input operators moved between running subtasks: both sides' state of a key
moves with its group (interval, window and temporal joins, connected streams, broadcast state beside keyed
state), on both state backends, and every result is committed once, nothing restarted."""

from __future__ import annotations

import os
import random
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from epochal import CheckpointConfig, JobState, StateConfig, StreamEnvironment, WatermarkStrategy
from epochal.state.keygroups import RoutingTable, key_group_of
from epochal.testing import CollectSink

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "two_inputs"))
import two_input_jobs as jobs  # noqa: E402 - tests/two_inputs, put on the path above

KEYS = 12


def _wait_running(handle: Any) -> None:
    deadline = time.monotonic() + 60
    while handle.status().state is not JobState.RUNNING:
        assert time.monotonic() < deadline, handle.status()
        time.sleep(0.005)


@pytest.mark.parametrize("backend", ["memory", "disk"])
@pytest.mark.parametrize("job", ["interval", "window", "temporal", "co_process", "broadcast"])
def test_every_used_key_group_moved_there_and_back_commits_each_result_once(
    tmp_path: Path, job: str, backend: str
) -> None:
    rng = random.Random(17)
    left = jobs.records(rng, 500, "l", keys=KEYS, span=50.0)
    right = jobs.records(rng, 200, "r", keys=KEYS, span=50.0)
    env = StreamEnvironment(parallelism=2, executor="inprocess", state=StateConfig(backend=backend),  # type: ignore[arg-type]
                            checkpoint=CheckpointConfig(interval=0.05, directory=str(tmp_path / "c")))
    watermarks = WatermarkStrategy.bounded_out_of_orderness(jobs.JITTER, timestamp="t")
    a = env.from_source(jobs.SlowRecords(left, splits=2, pause=0.01), name="left", watermarks=watermarks)
    b = env.from_source(jobs.SlowRecords(right, splits=2, pause=0.01), name="right", watermarks=watermarks)
    how = "left" if job in ("interval", "temporal") else "inner"
    sink = CollectSink()
    jobs.JOBS[job](a, b, how=how).sink_to(sink)
    handle = env.execute_async(f"moved-{job}")
    _wait_running(handle)
    owners = RoutingTable.contiguous(2, 128).owners
    used = sorted({key_group_of(k) for k in range(KEYS)})
    there = {g: 1 - owners[g] for g in used}  # every used group to the other subtask
    first = handle.move_key_groups(there, timeout=60)
    second = handle.move_key_groups({g: owners[g] for g in used}, timeout=60)  # and back
    assert first < second
    result = handle.result(timeout=120)
    assert result.restarts == 0
    assert jobs.committed(sink.committed()) == jobs.expected(job, left, right, how)
