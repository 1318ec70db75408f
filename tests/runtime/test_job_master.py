"""Tests of `epochal.runtime.master.job_master`: restarts, lineage, corrupt checkpoints, history."""

from __future__ import annotations

from pathlib import Path

import pytest

from epochal import CheckpointConfig, RestartStrategy, StreamEnvironment
from epochal.cluster.inprocess import InProcessExecutor
from epochal.errors import CheckpointError, JobFailedError, NoCheckpointError
from epochal.runtime.clock import VirtualClock
from epochal.runtime.master.job_master import JobMaster
from epochal.state.storage import CheckpointStorage
from epochal.testing import CollectSink, Crash, ListSource


def _job(  # noqa: ANN202
    directory: Path | None, items: list[object], *, restarts: int = 2, tolerable: int = 0, timeout: float = 10.0
):
    checkpoint = CheckpointConfig(
        interval=0.002, directory=str(directory) if directory else None, tolerable_failures=tolerable,
        timeout=timeout,
    )
    env = StreamEnvironment(
        parallelism=1, checkpoint=checkpoint, executor="inprocess", restart=RestartStrategy(max_restarts=restarts)
    )
    sink = CollectSink()
    env.from_source(ListSource(items, batch_size=2)).key_by(lambda x: x % 3).count().sink_to(sink)
    return env.job_graph("jm"), sink


def _run(job, seed: int = 0):  # noqa: ANN001, ANN202
    return InProcessExecutor(seed=seed, virtual_time=True).execute(job)


def test_from_checkpoint_needs_a_checkpoint_directory() -> None:
    job, _ = _job(None, [1, 2, 3])
    with pytest.raises(NoCheckpointError, match="directory"):
        JobMaster(job, VirtualClock(), "latest")


def test_failures_are_counted_and_the_budget_ends_the_job(tmp_path: Path) -> None:
    env = StreamEnvironment(
        parallelism=1, checkpoint=CheckpointConfig(interval=0.002, directory=str(tmp_path / "c")),
        executor="inprocess", restart=RestartStrategy(max_restarts=2),
    )
    failed_on: list[int] = []

    def fails_on_a_new_record_each_attempt(x: int) -> int:
        if x == len(failed_on):  # attempt n fails on record n - 1: never the same failure twice
            failed_on.append(x)
            raise ZeroDivisionError(f"record {x}")
        return x

    env.from_source(ListSource([0, 1, 2, 3])).map(fails_on_a_new_record_each_attempt).sink_to(CollectSink())
    with pytest.raises(JobFailedError) as failed:
        _run(env.job_graph("flaky"))
    assert failed.value.attempts == 3 and not failed.value.recurring  # the budget ended it
    assert failed_on == [0, 1, 2]
    assert "ZeroDivisionError" in str(failed.value.__cause__)


def test_a_restart_never_restores_a_newer_checkpoint_of_an_earlier_run(tmp_path: Path) -> None:
    """Started from checkpoint N, a job that fails before its own first checkpoint restores N,
    not a newer checkpoint that an earlier run left in the same directory."""
    directory = tmp_path / "c"
    items = list(range(200))
    job, _ = _job(directory, items)
    _run(job)
    storage = CheckpointStorage(str(directory))
    complete = storage.complete_checkpoints()
    assert len(complete) >= 3
    older = complete[0]

    job, _ = _job(directory, items)
    master = JobMaster(job, VirtualClock(), older)
    master.start_attempt(lambda task, message: None)
    master.on_failure(RuntimeError("before any checkpoint of this run"))
    assert master.restore_from is not None and master.restore_from.checkpoint_id == older
    assert master.restored_from == [older]


def test_a_fresh_job_over_an_earlier_runs_checkpoints_is_refused(tmp_path: Path) -> None:
    directory = tmp_path / "c"
    job, _ = _job(directory, list(range(50)))
    _run(job)
    with pytest.raises(CheckpointError, match="already holds complete checkpoints"):
        JobMaster(job, VirtualClock(), None)


def test_too_many_failed_checkpoints_fail_the_attempt_on_both_paths(tmp_path: Path) -> None:
    """More consecutive failed checkpoints than tolerated is a failure of the attempt: restarts,
    then JobFailedError whose cause is the CheckpointError."""
    # every checkpoint expires before its tasks can acknowledge it
    job, _ = _job(tmp_path / "c", list(range(400)), restarts=1, tolerable=0, timeout=0.0001)
    with pytest.raises(JobFailedError) as failed:
        _run(job)
    assert failed.value.attempts == 2
    assert isinstance(failed.value.__cause__, CheckpointError)
    assert "consecutive checkpoint failure" in str(failed.value.__cause__)


def test_the_checkpoint_history_spans_attempts(tmp_path: Path) -> None:
    items: list[object] = list(range(150))
    items.insert(120, Crash())
    job, sink = _job(tmp_path / "c", items, restarts=2)
    result = _run(job, seed=3)
    assert result.restarts == 1
    ids = [c.checkpoint_id for c in result.checkpoints]
    assert ids == sorted(set(ids)), "ids go on across attempts, never reused"
    assert result.restored_from[0] is None
    assert result.restored_from[1] in ids
    assert sum(1 for c in result.checkpoints if c.checkpoint_id <= (result.restored_from[1] or 0)) >= 1
