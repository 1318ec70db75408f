"""A barrier tells a task which checkpoint was complete when it was triggered.

On Spark the completion notice and the next barrier travel on different connections; a task that
snapshots before the notice arrives must still build on (and commit) the complete checkpoint.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from epochal import CheckpointConfig, StreamEnvironment
from epochal.plan.job_graph import JobGraph, TaskId
from epochal.runtime.task.task import Task
from epochal.runtime.wire.messages import TriggerCheckpoint
from epochal.testing import CollectSink, ListSource


def test_a_barrier_from_after_a_completion_commits_it_before_the_notice_arrives(
    tmp_path: Path, open_tasks: Callable[[JobGraph], dict[TaskId, Task]]
) -> None:
    env = StreamEnvironment(parallelism=1, executor="inprocess", batch_size=5,
                            checkpoint=CheckpointConfig(interval=1.0, directory=str(tmp_path)))
    sink = CollectSink()
    env.from_source(ListSource(list(range(20)))).map(lambda x: x + 1).sink_to(sink)
    (task,) = open_tasks(env.job_graph("notice")).values()  # source -> map -> sink, chained
    task.step()  # 5 records written, staged
    task.inbox.append(TriggerCheckpoint(1, 0.0))
    task.step()  # checkpoint 1 prepared: its records wait for completion
    assert sink.committed() == [] and task.checkpoints.last_notified == 0
    task.inbox.append(TriggerCheckpoint(2, 0.0, completed=1))  # no NotifyCheckpointComplete(1) yet
    task.step()
    assert task.checkpoints.last_notified == 1
    assert sink.committed() == [1, 2, 3, 4, 5]
