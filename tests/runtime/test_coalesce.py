"""A task joins the batches queued back to back on one input channel before running its chain.

Record lists up to `batch_size` records, Arrow batches of one schema up to `ARROW_JOIN_ROWS`
rows; never across a barrier or any other in-band event, so FIFO order and checkpoints hold.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pytest

from epochal import CheckpointConfig, StreamEnvironment
from epochal.plan.job_graph import JobGraph, TaskId
from epochal.runtime.task import input_gate
from epochal.runtime.task.task import Task
from epochal.runtime.wire.messages import TriggerCheckpoint
from epochal.testing import CollectSink, ListSource

OpenTasks = Callable[[JobGraph], dict[TaskId, Task]]


def _to_arrow(batch: pa.RecordBatch) -> pa.RecordBatch:
    return batch  # map_batches hands ListSource's ints over as an Arrow column `value`


def _tasks(open_tasks: OpenTasks, arrow: bool, batch_size: int) -> tuple[Task, Task, list[Any]]:
    """A source task and a count task (p=1, a key_by between them), their operators spied on."""
    env = StreamEnvironment(parallelism=1, executor="inprocess", batch_size=batch_size,
                            checkpoint=CheckpointConfig(interval=100.0, directory=None))
    stream = env.from_source(ListSource(list(range(100))))
    if arrow:
        counts = stream.map_batches(_to_arrow).key_by("value").count()
    else:  # lists are joined only below batch_size: halve them
        counts = stream.filter(lambda x: x % 2 == 0).key_by(lambda x: x).count()
    counts.sink_to(CollectSink())
    source, count = sorted(open_tasks(env.job_graph("coalesce")).values(), key=lambda t: t.id.vertex)
    seen: list[Any] = []
    operator = count.chain.first
    process = operator.process

    def spy(batch: Any) -> Any:
        seen.append(batch)
        return process(batch)

    operator.process = spy  # type: ignore[method-assign]
    return source, count, seen


def _rows(batch: Any) -> list[int]:
    return batch.column(0).to_pylist() if isinstance(batch, pa.RecordBatch) else list(batch)


@pytest.mark.parametrize("arrow", [False, True])
def test_queued_batches_are_joined_but_never_across_a_barrier(open_tasks: OpenTasks, arrow: bool) -> None:
    source, count, seen = _tasks(open_tasks, arrow, batch_size=6)
    source.step()
    source.step()
    source.inbox.append(TriggerCheckpoint(1, 0.0))
    source.step()  # the barrier goes out before this step's batch
    source.step()
    count.step()  # the two batches before the barrier, as one
    count.step()  # the barrier
    count.step()  # the two after it, as one
    step = 1 if arrow else 2
    assert [_rows(b) for b in seen] == [list(range(0, 12, step)), list(range(12, 24, step))]
    assert all(isinstance(b, pa.RecordBatch) == arrow for b in seen)
    assert count.checkpoints.last_checkpoint == 1


def test_arrow_batches_are_joined_up_to_the_cap_only(open_tasks: OpenTasks, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(input_gate, "ARROW_JOIN_ROWS", 12)
    source, count, seen = _tasks(open_tasks, True, batch_size=5)
    for _ in range(3):
        source.step()
    count.step()  # 5 + 5 rows; a third batch would make 15 > 12
    count.step()
    assert [len(_rows(b)) for b in seen] == [10, 5]
