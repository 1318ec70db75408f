"""Tests of `epochal.runtime.master.loop_termination.LoopTermination`: the job master ends a loop only after one
probe round that every head of the loop came back from clean, never after a round in which any
head saw the loop active (a task of the loop processed records).

The detector is driven directly with the heads' round messages; what it decides is what it sends.
"""

from __future__ import annotations

from collections.abc import Iterable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from epochal import DataStream, StreamEnvironment
from epochal.plan.job_graph import JobGraph, TaskId
from epochal.runtime.master.loop_termination import LoopTermination
from epochal.runtime.wire.messages import EndLoop, LoopRoundEnded
from epochal.testing import CollectSink, ListSource


def _round(head: TaskId, number: int, *, active: bool) -> LoopRoundEnded:
    """A head's verdict on probe round `number` (the one place that spells the message's fields)."""
    return LoopRoundEnded(head, number, not active)


def _halving_loop(stream: DataStream, name: str) -> DataStream:
    def body(loop: DataStream) -> tuple[DataStream, DataStream]:
        halved = loop.map(lambda n: n // 2, name=f"{name}-halve")
        return halved.filter(lambda n: n > 0, name=f"{name}-positive"), halved

    return stream.iterate(body, name=name)


def _job(parallelism: int, loops: int = 1) -> JobGraph:
    env = StreamEnvironment(parallelism=parallelism, executor="inprocess")
    stream = env.from_source(ListSource([5, 9], splits=2))
    for i in range(loops):
        stream = _halving_loop(stream, f"loop{i}")
    stream.sink_to(CollectSink())
    return env.job_graph("loops")


def _heads(job: JobGraph) -> list[list[TaskId]]:
    """Per loop, in vertex order: the subtasks of its head (the target of its back-edge)."""
    vertices = sorted({e.target for e in job.edges if e.is_back_edge})
    return [[TaskId(v, i) for i in range(job.vertex(v).parallelism)] for v in vertices]


class _Sent:
    """What the detector sent, to whom."""

    def __init__(self) -> None:
        self.messages: list[tuple[TaskId, object]] = []

    def __call__(self, task: TaskId, message: object) -> None:
        self.messages.append((task, message))

    def end_loops(self) -> list[TaskId]:
        assert all(type(m) is EndLoop for _, m in self.messages), self.messages
        return [task for task, _ in self.messages]


def _detector(job: JobGraph) -> tuple[LoopTermination, _Sent]:
    sent = _Sent()
    return LoopTermination(job, sent), sent


def _feed(detector: LoopTermination, messages: Iterable[LoopRoundEnded]) -> None:
    for message in messages:
        detector.on_round(message)


def test_a_single_head_ends_its_loop_after_a_clean_round_only() -> None:
    job = _job(parallelism=1)
    ((head,),) = _heads(job)
    detector, sent = _detector(job)
    _feed(detector, [_round(head, 1, active=True), _round(head, 2, active=True)])
    assert sent.end_loops() == []
    detector.on_round(_round(head, 3, active=False))
    assert sent.end_loops() == [head]


@pytest.mark.parametrize("parallelism", [2, 3])
def test_the_loop_ends_only_once_every_head_came_back_clean_from_the_same_round(parallelism: int) -> None:
    job = _job(parallelism)
    (heads,) = _heads(job)
    detector, sent = _detector(job)
    for head in heads[:-1]:
        detector.on_round(_round(head, 1, active=False))
        assert sent.end_loops() == [], "ended before every head reported"
    detector.on_round(_round(heads[-1], 1, active=False))
    assert sent.end_loops() == heads  # every head is told, once


def test_a_round_that_any_head_saw_active_never_ends_the_loop() -> None:
    job = _job(parallelism=2)
    ((a, b),) = _heads(job)
    detector, sent = _detector(job)
    # every head has a clean round, but never the same one: records were still moving
    _feed(detector, [
        _round(a, 1, active=False), _round(b, 1, active=True),
        _round(a, 2, active=True), _round(b, 2, active=False),
        _round(a, 3, active=True), _round(b, 3, active=True),
    ])
    assert sent.end_loops() == []
    _feed(detector, [_round(b, 4, active=False), _round(a, 4, active=False)])
    assert sent.end_loops() == [a, b]


def test_heads_out_of_step_are_judged_round_by_round() -> None:
    job = _job(parallelism=2)
    ((a, b),) = _heads(job)
    detector, sent = _detector(job)
    # head a runs two rounds ahead; head b's late active verdict on round 1 must not be mixed
    # with a's clean round 2, nor a's clean round 1 with b's round 2
    _feed(detector, [_round(a, 1, active=False), _round(a, 2, active=False), _round(a, 3, active=True)])
    detector.on_round(_round(b, 1, active=True))
    assert sent.end_loops() == []
    detector.on_round(_round(b, 2, active=False))
    assert sent.end_loops() == [a, b]


def test_rounds_after_the_end_send_nothing_more() -> None:
    job = _job(parallelism=2)
    ((a, b),) = _heads(job)
    detector, sent = _detector(job)
    _feed(detector, [_round(a, 1, active=False), _round(b, 1, active=False)])
    _feed(detector, [_round(a, 2, active=False), _round(b, 2, active=False), _round(a, 3, active=True)])
    assert sent.end_loops() == [a, b]


def test_verdicts_of_tasks_that_head_no_loop_are_ignored() -> None:
    job = _job(parallelism=1)
    ((head,),) = _heads(job)
    source = TaskId(0, 0)
    assert source != head
    detector, sent = _detector(job)
    detector.on_round(_round(source, 1, active=False))
    assert sent.end_loops() == []
    detector.on_round(_round(head, 1, active=True))
    assert sent.end_loops() == []


def test_two_loops_end_independently() -> None:
    job = _job(parallelism=2, loops=2)
    first, second = _heads(job)
    detector, sent = _detector(job)
    _feed(detector, [_round(h, 1, active=False) for h in second])
    _feed(detector, [_round(h, 1, active=h.subtask == 0) for h in first])
    assert sent.end_loops() == second
    _feed(detector, [_round(h, 2, active=False) for h in first])
    assert sent.end_loops() == second + first


_Verdict = tuple[int, int, bool]  # head index, round, active


@st.composite
def _verdicts(draw: st.DrawFn) -> tuple[int, list[_Verdict]]:
    """Heads, and their verdicts `(head, round, active)`: rounds in order per head, heads interleaved."""
    heads = draw(st.integers(1, 3))
    per_head = [draw(st.lists(st.booleans(), max_size=6)) for _ in range(heads)]
    queues = [[(h, n, active) for n, active in enumerate(flags, start=1)] for h, flags in enumerate(per_head)]
    order: list[_Verdict] = []
    while any(queues):
        h = draw(st.sampled_from([i for i, q in enumerate(queues) if q]))
        order.append(queues[h].pop(0))
    return heads, order


@settings(max_examples=300, deadline=None)
@given(_verdicts())
def test_the_loop_ends_exactly_when_some_round_is_clean_at_every_head(case: tuple[int, list[_Verdict]]) -> None:
    parallelism, order = case
    job = _job(parallelism)
    (heads,) = _heads(job)
    detector, sent = _detector(job)
    seen: dict[int, dict[int, bool]] = {}
    for h, number, active in order:
        detector.on_round(_round(heads[h], number, active=active))
        seen.setdefault(number, {})[h] = active
        some_round_clean = any(len(v) == parallelism and not any(v.values()) for v in seen.values())
        assert sent.end_loops() == (heads if some_round_clean else [])
