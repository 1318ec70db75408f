"""Loops: deciding that a loop is empty (a loop head's snapshots in flight: `runtime.in_flight`).

Termination, so that a bounded job with a loop can finish:

A loop head whose input has ended sends termination probes round its loop
(`elements.LoopProbe`); every task of the loop forwards a probe once it arrived on all its loop
inputs, marked active if the task processed anything since the previous round. A loop may have
several head subtasks, and a task's activity reaches only the heads downstream of it, so no
single head can decide: the job master collects each head's verdict per round and ends the
loop when, for one round, no head saw it active. Then no task processed a record between two
probe passes and none sent one after a probe passed (FIFO channels): the loop is empty.
"""

from __future__ import annotations

from collections.abc import Callable

from ..plan.job_graph import JobGraph, TaskId
from .wire.elements import LoopProbe
from .wire.messages import EndLoop, LoopRoundEnded


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


class LoopProbes:
    """One task's part in loop termination: starting rounds (a head) or forwarding them.

    `active` is set whenever the task processes records; a probe forwarded (or a verdict sent)
    clears it, so each round reports whether the task processed anything since the last one.

    Args:
        is_head: the task heads a loop: it starts rounds and sends the verdicts to the job master.
        back_edges: the head's inputs that close the loop.
        loop_inputs: a loop member's inputs from inside the loop (back-edges included).
        num_inputs: all of the task's inputs.
    """

    def __init__(self, is_head: bool, back_edges: frozenset[int], loop_inputs: frozenset[int], num_inputs: int) -> None:
        self.is_head = is_head
        self.back_edges = back_edges
        self.loop_inputs = loop_inputs
        self.outside = frozenset(range(num_inputs)) - loop_inputs
        self.active = False
        self.in_flight = False
        self._round = 0
        self._arrivals: dict[int, list[bool]] = {}

    def start_round(self) -> LoopProbe:
        """A head whose input ended sends a probe round its loop."""
        self._round += 1
        self.in_flight = True
        self.active = False
        return LoopProbe(self._round, False)

    def on_probe(self, probe: LoopProbe, ended: frozenset[int]) -> LoopProbe | tuple[int, bool] | None:
        """A probe arrived on one loop input; `ended` are the task's inputs that have ended.

        Returns None until the round arrived on every open loop input; then, for a member, the
        probe to forward, and for a head, `(round, clean)`: its verdict for the job master.
        """
        arrivals = self._arrivals.setdefault(probe.round, [])
        arrivals.append(probe.active)
        expected = len(self.back_edges - ended) if self.is_head else len(self.loop_inputs)
        if len(arrivals) < expected:
            return None
        del self._arrivals[probe.round]
        if self.is_head:
            self.in_flight = False
            return probe.round, not any(arrivals) and not self.active
        active = any(arrivals) or self.active or not self.outside <= ended
        self.active = False
        return LoopProbe(probe.round, active)
