"""The synchronous (Naiad-style) checkpoint mode, kept for comparison with ABS."""

from __future__ import annotations

import collections
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

import pytest

from epochal import CheckpointConfig, StreamEnvironment
from epochal.cluster.inprocess import InProcessExecutor
from epochal.plan.job_graph import JobGraph, TaskId
from epochal.runtime.task.task import Task
from epochal.runtime.wire.messages import NotifyCheckpointAborted, NotifyCheckpointComplete, TriggerCheckpoint
from epochal.testing import CollectSink, Crash, ListSource


def _env(
    tmp_path: Path, items: list[Any], mode: Literal["aligned", "synchronous"] = "synchronous"
) -> tuple[StreamEnvironment, CollectSink]:
    env = StreamEnvironment(
        parallelism=2, executor="inprocess", batch_size=16,
        checkpoint=CheckpointConfig(interval=0.01, directory=str(tmp_path / "ckpt"), mode=mode),
    )
    sink = CollectSink()
    env.from_source(ListSource(items, splits=2)).key_by(lambda w: w).count().sink_to(sink)
    return env, sink


def test_mode_must_be_known() -> None:
    with pytest.raises(ValueError, match="mode"):
        CheckpointConfig(mode="eventually")  # type: ignore[arg-type]


def test_synchronous_checkpoints_are_exactly_once_across_a_crash(tmp_path: Path) -> None:
    words = [f"w{i % 7}" for i in range(600)]
    items: list[Any] = [*words[:400], Crash(), *words[400:]]
    env, sink = _env(tmp_path, items)
    # a seed whose interleaving completes a checkpoint before the crash (the scheduler's draws decide)
    result = InProcessExecutor(seed=0, virtual_time=True).execute(env.job_graph("sync"))
    assert result.restarts == 1 and result.restored_from[-1] is not None
    totals = collections.Counter(words)
    assert sorted(sink.committed()) == sorted((w, n) for w, c in totals.items() for n in range(1, c + 1))
    assert len(result.checkpoints) > 2


def test_a_source_halts_after_a_synchronous_barrier_until_the_checkpoint_ends(
    tmp_path: Path, open_tasks: Callable[[JobGraph], dict[TaskId, Task]]
) -> None:
    env, _ = _env(tmp_path, [f"w{i}" for i in range(100)])
    source = next(t for t in open_tasks(env.job_graph("halt")).values() if t.source is not None)
    assert source.is_runnable()
    source.inbox.append(TriggerCheckpoint(1, 0.0, synchronous=True))
    source.step()
    assert not source.is_runnable()  # halted: emits nothing until the checkpoint ends
    source.inbox.append(NotifyCheckpointComplete(1))
    source.step()
    assert source.is_runnable()
    source.inbox.append(TriggerCheckpoint(2, 0.0, synchronous=True))
    source.step()
    assert not source.is_runnable()
    source.inbox.append(NotifyCheckpointAborted(2))
    source.step()
    assert source.is_runnable()
