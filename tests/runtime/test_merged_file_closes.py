"""The closes of merged checkpoint files (`runtime.task.file_merging`), in order and given up.

A background runner may finish work out of order (the seeded in-process host picks its next unit
by the seed). Two checkpoints' files used to be closed in whatever order it ran them: a newer
checkpoint released first completed first, subsumed the older one, and retention deleted the
older's directory under its pending rename (logged as "checkpoint N's merged file failed ... No
such file or directory", seen on the last checkpoints of the loop tests). The older checkpoint
was lost for nothing; no manifest listed its file, so nothing was corrupt.
"""

from __future__ import annotations

import logging
import os
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from test_nested_loops import _failing, _inputs, _nested_job

from epochal.cluster.inprocess import InProcessExecutor
from epochal.plan.job_graph import TaskId
from epochal.runtime.task.file_merging import SnapshotMerger
from epochal.state.manifest import FileHandle
from epochal.state.storage import CheckpointStorage


class _LastFirst:
    """A background runner that runs the newest unit first (as a seed may)."""

    def __init__(self) -> None:
        self.units: list[Callable[[], None]] = []

    def submit(self, work: Callable[[], Any], on_done: Callable[[Any], None]) -> None:
        self.units.append(lambda: on_done(work()))

    read_ahead = submit

    def run(self) -> None:
        while self.units:
            self.units.pop()()


def _merger(tmp_path: Path) -> tuple[SnapshotMerger, _LastFirst, list[TaskId]]:
    runner = _LastFirst()
    merger = SnapshotMerger(CheckpointStorage(str(tmp_path / "c")), runner, "test")
    tasks = [TaskId(1, 0), TaskId(1, 1)]
    for task in tasks:
        merger.register(task)
    return merger, runner, tasks


def _write(merger: SnapshotMerger, checkpoint_id: int, task: TaskId, released: list[Any]) -> None:
    assert merger.started(checkpoint_id, task)
    merger.sink.write_file(checkpoint_id, "state", [b"x" * 10])

    def release(handle: FileHandle | None, error: str | None) -> None:
        released.append((checkpoint_id, task, handle, error))

    merger.finished(checkpoint_id, task, release)


def test_files_close_in_the_order_their_checkpoints_were_ready(tmp_path: Path) -> None:
    merger, runner, tasks = _merger(tmp_path)
    released: list[Any] = []
    for checkpoint_id in (20, 21):
        for task in tasks:
            _write(merger, checkpoint_id, task, released)
    runner.run()
    assert [(cid, error) for cid, _, _, error in released] == [(20, None), (20, None), (21, None), (21, None)]
    for _, _, handle, _ in released:
        assert handle is not None and os.path.getsize(tmp_path / "c" / handle.path) == 20
    assert merger.files_written == 2


def test_a_subsumed_checkpoints_file_is_given_up_not_renamed(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    merger, runner, tasks = _merger(tmp_path)
    released: list[Any] = []
    _write(merger, 20, tasks[0], released)  # the other task never takes 20
    for task in tasks:
        _write(merger, 21, task, released)
    runner.run()
    merger.storage.discard(20)  # 21 completed: retention deletes the directory of 20
    with caplog.at_level(logging.INFO, logger="epochal.runtime.task.file_merging"):
        merger.completed(21)
        runner.run()
    assert [cid for cid, *_ in released] == [21, 21]  # 20 acknowledges nothing: it is dropped
    assert merger.files_abandoned == 1 and merger.files_written == 1
    assert not (tmp_path / "c" / "chk-00000020").exists()
    assert "failed" not in caplog.text


def test_a_seeded_loop_run_loses_no_checkpoint_to_a_late_rename(
    tmp_path: Path, caplog: pytest.LogCaptureFixture,
) -> None:
    """The run where it was seen (nested loops, trial 7): checkpoint 21's file was closed before
    20's, so 21 completed first and 20's rename found its directory deleted."""
    trial = 7
    env, _ = _nested_job(2, _inputs(40, seed=7), str(tmp_path / "out"), str(tmp_path / "c"), seed=trial)
    fail_at = random.Random(trial).randrange(40, 900)
    with caplog.at_level(logging.INFO, logger="epochal.runtime.task.file_merging"):
        result = InProcessExecutor(seed=trial, virtual_time=True).execute(_failing(env.job_graph("n"), fail_at))
    assert "merged file failed" not in caplog.text
    ids = [c.checkpoint_id for c in result.checkpoints]
    assert ids[-2:] == [ids[-1] - 1, ids[-1]], f"a checkpoint was subsumed: {ids}"
