"""Two-input operators on local Spark: a worker SIGKILLed mid-stream, and key groups moved live,
under an interval join, a window join, a temporal join, connected streams and broadcast state. The committed
output is exactly the brute-force result (`tests/two_inputs/jobs.py`): both sides' state comes
back from the checkpoint with its key groups (broadcast state from its one copy), and moves with
them between running workers.
"""

from __future__ import annotations

import os
import random
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from epochal import CheckpointConfig, JobState, RestartStrategy, StreamEnvironment, WatermarkStrategy
from epochal.connectors import FileSink, read_committed
from epochal.state.keygroups import RoutingTable
from spark_jobs import run_and_kill, wait_until

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "two_inputs"))
import two_input_jobs as jobs  # noqa: E402 - tests/two_inputs, put on the path above

pytestmark = [pytest.mark.spark, pytest.mark.fault]


@pytest.fixture(autouse=True)
def _ship_jobs() -> None:
    """Spark's workers cannot import tests/two_inputs: its sources and functions go by value."""
    from pyspark import cloudpickle

    cloudpickle.register_pickle_by_value(jobs)  # type: ignore[no-untyped-call]


def _env(spark: Any, job: str, left: list[Any], right: list[Any], out: str, ckpt: str, how: str,
         pause: float = 0.03) -> StreamEnvironment:
    env = StreamEnvironment(parallelism=2, executor="spark", spark=spark, batch_size=16,
                            checkpoint=CheckpointConfig(interval=0.3, directory=ckpt, retain=1_000),
                            restart=RestartStrategy(max_restarts=3))
    watermarks = WatermarkStrategy.bounded_out_of_orderness(jobs.JITTER, timestamp="t")
    a = env.from_source(jobs.SlowRecords(left, splits=2, pause=pause), name="left", watermarks=watermarks)
    b = env.from_source(jobs.SlowRecords(right, splits=2, pause=pause), name="right", watermarks=watermarks)
    jobs.JOBS[job](a, b, how=how).sink_to(FileSink(out))
    return env


def _inputs(seed: int) -> tuple[list[Any], list[Any]]:
    rng = random.Random(seed)
    return (jobs.records(rng, 700, "l", keys=16, span=80.0), jobs.records(rng, 250, "r", keys=16, span=80.0))


@pytest.mark.parametrize("job", ["interval", "window", "temporal", "co_process", "broadcast"])
def test_a_worker_sigkill_mid_stream_commits_the_join_exactly(spark: Any, tmp_path: Path, job: str) -> None:
    left, right = _inputs(3)
    how = "left" if job in ("interval", "temporal") else "inner"
    for trial in range(2):
        out, ckpt = str(tmp_path / f"out{trial}"), str(tmp_path / f"ckpt{trial}")
        env = _env(spark, job, left, right, out, ckpt, how)
        result, _ = run_and_kill(spark, env, f"two-inputs-{job}", ckpt, random.Random(trial),
                                 after_checkpoint=True, delay=(0.0, 1.0))
        assert result.restarts == 1, f"trial {trial}: the kill must have caused one restart"
        assert result.restored_from[-1] is not None, f"trial {trial}: restored from a checkpoint"
        assert jobs.committed(read_committed(out)) == jobs.expected(job, left, right, how), f"trial {trial}"


@pytest.mark.parametrize("job", ["interval", "window", "temporal", "co_process", "broadcast"])
def test_key_groups_moved_live_on_spark_take_both_sides_state_along(spark: Any, tmp_path: Path, job: str) -> None:
    left, right = _inputs(5)
    how = "left" if job in ("interval", "temporal") else "inner"
    out, ckpt = str(tmp_path / "out"), str(tmp_path / "c")
    handle = _env(spark, job, left, right, out, ckpt, how).execute_async(f"moved-{job}")
    wait_until(lambda: (handle.status().last_checkpoint or 0) >= 2, "two checkpoints", timeout=120)
    owners = RoutingTable.contiguous(2, 128).owners
    there = {g: 1 - owners[g] for g in range(0, 128, 2)}
    handle.move_key_groups(there, timeout=120)
    handle.move_key_groups({g: owners[g] for g in there}, timeout=120)  # and back
    result = handle.result(timeout=300)
    assert result.restarts == 0
    assert jobs.committed(read_committed(out)) == jobs.expected(job, left, right, how)


@pytest.mark.parametrize("job", ["interval", "window", "temporal", "co_process", "broadcast"])
def test_a_rescale_on_spark_restores_both_sides_state_at_the_new_parallelism(spark: Any, tmp_path: Path,
                                                                               job: str) -> None:
    """2 -> 1: the stage is relaunched from a checkpoint at 1 (both sides' state of every key group
    in the one subtask; broadcast state from its one copy), and the join commits exactly."""
    left, right = _inputs(7)
    how = "left" if job in ("interval", "temporal") else "inner"
    out, ckpt = str(tmp_path / "out"), str(tmp_path / "c")
    handle = _env(spark, job, left, right, out, ckpt, how, pause=0.08).execute_async(f"rescaled-{job}")
    wait_until(lambda: (handle.status().last_checkpoint or 0) >= 2, "two checkpoints", timeout=120)
    rescaled_from = handle.rescale(1, timeout=120)
    wait_until(lambda: handle.status().parallelism == 1 or handle.status().state is not JobState.RUNNING,
               "running at 1", timeout=120)
    result = handle.result(timeout=300)
    assert rescaled_from >= 2 and result.restored_from[-1] is not None, "restored from a checkpoint at 1"
    assert jobs.committed(read_committed(out)) == jobs.expected(job, left, right, how)


def test_a_side_output_of_a_co_process_function_commits_exactly_once_across_a_worker_sigkill(
    spark: Any, tmp_path: Path
) -> None:
    """The pairs of odd-numbered left records go to a side output, the others out: each part
    exactly once in its own sink after a worker was killed mid-stream."""
    left, right = _inputs(11)
    out, side, ckpt = str(tmp_path / "out"), str(tmp_path / "side"), str(tmp_path / "c")
    env = StreamEnvironment(parallelism=2, executor="spark", spark=spark, batch_size=16,
                            checkpoint=CheckpointConfig(interval=0.3, directory=ckpt, retain=1_000),
                            restart=RestartStrategy(max_restarts=3))
    watermarks = WatermarkStrategy.bounded_out_of_orderness(jobs.JITTER, timestamp="t")
    a = env.from_source(jobs.SlowRecords(left, splits=2, pause=0.03), name="left", watermarks=watermarks)
    b = env.from_source(jobs.SlowRecords(right, splits=2, pause=0.03), name="right", watermarks=watermarks)
    pairs = a.key_by("k").connect(b.key_by("k")).process(jobs.PairsOddToTheSide()).uid("j")
    pairs.sink_to(FileSink(out))
    pairs.side_output(jobs.ODD_PAIRS).sink_to(FileSink(side))
    result, _ = run_and_kill(spark, env, "side-output", ckpt, random.Random(4), after_checkpoint=True,
                             delay=(0.0, 1.0))
    assert result.restarts == 1 and result.restored_from[-1] is not None
    every = jobs.expected("co_process", left, right)
    odd = Counter({p: n for p, n in every.items() if int(p[0][1:]) % 2})
    assert odd and len(odd) < len(every)
    assert jobs.committed(read_committed(side)) == odd
    assert jobs.committed(read_committed(out)) == every - odd
