"""A task with an input per upstream subtask (a keyed edge at parallelism p gives it p): what it
costs per step does not grow with p, and it reads every element of every input once, in order."""

from __future__ import annotations

from collections.abc import Callable

from epochal import StreamEnvironment
from epochal.plan.job_graph import JobGraph, TaskId
from epochal.runtime.task.task import Task
from epochal.runtime.wire.elements import END_OF_INPUT, Barrier, Watermark
from epochal.state.keygroups import key_group_of
from epochal.testing import CollectSink, ListSource

P = 16


def _count_task(open_tasks: Callable[[JobGraph], dict[TaskId, Task]]) -> Task:
    env = StreamEnvironment(parallelism=P, executor="inprocess")
    env.from_source(ListSource([0])).key_by(lambda x: x).count().sink_to(CollectSink())
    tasks = open_tasks(env.job_graph("many"))
    return next(t for t in tasks.values() if t.source is None and t.id.subtask == 0)


def _steps(task: Task) -> int:
    steps = 0
    while task.is_runnable():
        steps += task.run_steps()
    return steps


def test_one_step_takes_the_barriers_heading_every_input_and_none_is_lost(
    open_tasks: Callable[[JobGraph], dict[TaskId, Task]],
) -> None:
    task = _count_task(open_tasks)
    owned = [k for k in range(10_000) if key_group_of(k, 128) in task.key_groups][:P]
    assert len(task.gate) == P
    for i, channel in enumerate(task.gate.channels):
        channel.send(Barrier(1, 0.0))
        channel.send(Barrier(2, 0.0))  # more control elements than inputs: the step stops, takes none too many
        channel.send([owned[i]])
    steps = _steps(task)
    assert task.checkpoints.last_checkpoint == 2
    assert task.chain.records_in[0] == P  # every record after the barriers, once
    assert steps == 3  # a step per checkpoint's P barriers, one for the P record lists (joined)
    assert task.gate.queued() == (0, 0)


def test_watermarks_and_ends_of_input_heading_the_inputs_are_taken_in_a_step(
    open_tasks: Callable[[JobGraph], dict[TaskId, Task]],
) -> None:
    task = _count_task(open_tasks)
    for channel in task.gate.channels:
        channel.send(Watermark(5.0))
        channel.send(END_OF_INPUT)
    steps = _steps(task)
    assert steps <= 3 and task.gate.aligner.all_ended
    assert task.input.watermarks.current == float("inf")


def test_record_lists_heading_the_inputs_are_joined_but_never_across_a_barrier(
    open_tasks: Callable[[JobGraph], dict[TaskId, Task]],
) -> None:
    """A keyed edge cuts batches into a piece per consumer; a step joins the pieces heading its
    inputs (`input_joining`), but a list behind a barrier waits for the alignment to end."""
    task = _count_task(open_tasks)
    owned = [k for k in range(10_000) if key_group_of(k, 128) in task.key_groups][: 2 * P]
    batches: list[int] = []
    process = task.chain.process

    def counted(batch: object) -> None:
        batches.append(len(batch))  # type: ignore[arg-type]
        process(batch)  # type: ignore[arg-type]

    task.chain.process = counted  # type: ignore[method-assign]
    channels = task.gate.channels
    channels[0].send([owned[0]])  # ahead of its barrier
    channels[0].send(Barrier(1, 0.0))
    channels[0].send([owned[1]])
    for i, channel in enumerate(channels[1:], start=1):
        channel.send(Barrier(1, 0.0))
        channel.send([owned[2 * i]])
        channel.send([owned[2 * i + 1]])
    _steps(task)
    assert task.checkpoints.last_checkpoint == 1 and task.chain.records_in[0] == 2 * P
    # the one list ahead of the barriers alone; after the alignment, all the others joined
    # (a channel's two lists back to back by the gate, the channels' by the step)
    assert batches == [1, 2 * P - 1]
