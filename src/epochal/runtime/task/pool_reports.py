"""A task's side of a function pool's resize (vertical elasticity, ChronoStream §III-D): apply it,
and tell the job master once the pool runs at its new size.

A pool's new processes join it only once they loaded the function (a Python process starts in
0.1-0.5 s, seconds on a loaded machine), and the subtask never waits for them
(`runtime.operators.function_pool`). So the resize is applied at once, and the task looks at the
pool again at each of its steps, and at least every `POLL_S` seconds while one is pending (a
timer: an idle task is stepped too), until every process of the pool answered; then it sends
`PoolResized`, and `JobHandle.resize` returns once every subtask of the operator did
(`runtime.master.pools`). A shrink closes the surplus processes at once: it is answered at once.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ...plan.job_graph import TaskId
from ..clock import Clock
from ..wire.messages import PoolResized, ResizePool
from .chain import OperatorChain

POLL_S = 0.02  # seconds between two looks at a growing pool while the task has nothing else to do


class PoolReports:
    """The resizes a task applied whose pools are not all ready yet.

    Args:
        chain: the task's operators.
        task: the task, named in its answers.
        send: to the job master.
        clock: the task's clock (the poll's timer).
    """

    def __init__(self, chain: OperatorChain, task: TaskId, send: Callable[[Any], None], clock: Clock) -> None:
        self.chain = chain
        self.task = task
        self.send = send
        self.clock = clock
        self._pending: dict[str, tuple[Any, int]] = {}  # uid -> (operator, processes)
        self._due: float | None = None

    def resize(self, message: ResizePool) -> None:
        """Run the operator's pool at `message.processes` from now on; answer once it does."""
        operator = self.chain.find(message.uid)
        resize = getattr(operator, "resize", None)
        if resize is None:
            return  # the job master sends it only to the operator's subtasks, which have a pool
        resize(message.processes)
        self._pending[message.uid] = (operator, message.processes)  # a newer resize replaces one pending
        self.poll()

    def poll(self) -> None:
        """Answer for every pool that runs its size now; look again in `POLL_S` for the others."""
        if not self._pending:
            return
        for uid, (operator, processes) in list(self._pending.items()):
            if operator.pool_ready() >= processes:
                del self._pending[uid]
                self.send(PoolResized(self.task, uid, processes))
        self._due = self.clock.now() + POLL_S if self._pending else None

    def next_timer(self, timer: float | None) -> float | None:
        """`timer`, or the next look at a pending pool if that comes first."""
        due = self._due
        if due is None:
            return timer
        return due if timer is None else min(timer, due)
