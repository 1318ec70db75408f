"""Loop termination on the job master: deciding that a loop is empty, so a bounded job with a loop
can finish (the tasks' part: `task.loop_probes`; a loop head's snapshots: `task.in_flight`).

A loop head whose input has ended sends termination probes round its loop
(`wire.elements.LoopProbe`); every task of the loop forwards a probe once it arrived on all its loop
inputs, marked active if the task processed anything since the previous round. A loop may have
several head subtasks, and a task's activity reaches only the heads downstream of it, so no
single head can decide: the job master collects each head's verdict per round and ends the
loop when, for one round, no head saw it active. Then no task processed a record between two
probe passes and none sent one after a probe passed (FIFO channels): the loop is empty.
"""

from __future__ import annotations

from collections.abc import Callable

from ...plan.job_graph import JobGraph, TaskId
from ..wire.messages import EndLoop, LoopRoundEnded


class LoopTermination:
    """The job master's side of loop termination, for every loop of one job."""

    def __init__(self, job: JobGraph, send: Callable[[TaskId, object], None]) -> None:
        self.send = send
        self.heads: dict[int, list[TaskId]] = {
            e.target: [TaskId(e.target, i) for i in range(job.vertex(e.target).parallelism)]
            for e in job.edges
            if e.is_back_edge
        }
        self._rounds: dict[tuple[int, int], dict[TaskId, bool]] = {}
        self.ended: set[int] = set()

    def on_round(self, message: LoopRoundEnded) -> None:
        vertex = message.task.vertex
        if vertex in self.ended or vertex not in self.heads:
            return
        verdicts = self._rounds.setdefault((vertex, message.round), {})
        verdicts[message.task] = message.clean
        if len(verdicts) < len(self.heads[vertex]):
            return
        del self._rounds[(vertex, message.round)]
        if all(verdicts.values()):
            self.ended.add(vertex)
            for task in self.heads[vertex]:
                self.send(task, EndLoop())
