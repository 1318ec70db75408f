"""The job master's side of a function pool's resize (`epochal.runtime.master.pools`): the
command is done once every subtask of the operator said its pool runs the new size."""

from __future__ import annotations

from typing import Any

import pytest

from epochal import EpochalError, StreamEnvironment
from epochal.plan.job_graph import TaskId
from epochal.runtime.commands import Resize, Ticket
from epochal.runtime.master.pools import PoolSizes
from epochal.runtime.wire.messages import PoolResized, ResizePool
from epochal.testing import CollectSink, ListSource
from pool_functions import square


def _pools() -> tuple[PoolSizes, list[tuple[TaskId, Any]], list[TaskId]]:
    env = StreamEnvironment(parallelism=3, executor="inprocess")
    env.from_source(ListSource([1])).map(square, name="work", processes=1).sink_to(CollectSink())
    job = env.job_graph("pools")
    vertex = next(v for v in job.vertices if any(op.uid == "work" for op in v.chain))
    return PoolSizes(job), [], [TaskId(vertex.id, s) for s in range(3)]


def _resize(pools: PoolSizes, sent: list[tuple[TaskId, Any]], processes: int) -> Ticket[int]:
    ticket: Ticket[int] = Ticket(Resize("work", processes))
    pools.resize(ticket, lambda task, message: sent.append((task, message)))
    return ticket


def test_a_resize_is_done_once_every_subtask_reported_its_pool_at_the_size() -> None:
    pools, sent, tasks = _pools()
    ticket = _resize(pools, sent, 4)
    assert sent == [(t, ResizePool("work", 4)) for t in tasks]
    for task in tasks[:2]:
        pools.reported(PoolResized(task, "work", 4))
    pools.reported(PoolResized(tasks[2], "work", 3))  # another size (an older resize's): not this one
    assert not ticket.is_done
    pools.reported(PoolResized(tasks[2], "work", 4))
    assert ticket.wait(0) == 4 and pools.sizes == {"work": 4}


def test_a_newer_resize_or_the_attempt_ending_fails_the_one_waiting_and_the_size_stays() -> None:
    pools, sent, tasks = _pools()
    first = _resize(pools, sent, 4)
    second = _resize(pools, sent, 2)
    with pytest.raises(EpochalError, match="overtaken by one to 2"):
        first.wait(0)
    pools.stop("the attempt failed")
    with pytest.raises(EpochalError, match="the attempt failed before every pool ran it"):
        second.wait(0)
    assert pools.sizes == {"work": 2}, "re-sent to the next attempt's tasks"
    for task in tasks:
        pools.reported(PoolResized(task, "work", 2))  # the restarted tasks' answers: nothing waits
