"""The job master's side of vertical elasticity (ChronoStream §III-D): the size of each
operator's function pool, changed live and kept across attempts.

ChronoStream records its thread-control table, the configuration state that maps threads to
slices, with the job manager, so that a container rebuilt after a failure runs with the
threads it was given. Here that table is `PoolSizes.sizes`: a resize is sent to every subtask
of the operator at once (no barrier: a stateless function's output does not depend on how many
processes compute it), and after a restart the sizes in effect are sent again before the first
checkpoint, so a restored subtask goes on with the pool it had, not the one the job was
written with.

A resize is done when every subtask of the operator said its pool runs the new size, every
process of it with the function loaded (`PoolResized`, `runtime.task.pool_reports`): the
command's ticket waits for that, so `JobHandle.resize`, `epochal resize` and `POST /resize` return
once the cores are at work. An attempt that ends first fails the ticket (the size stays in
effect: the next attempt's tasks get it); a newer resize of the operator fails the older one's.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from ...errors import EpochalError
from ...plan.job_graph import JobGraph, TaskId
from ...plan.specs import RecordFnSpec
from ..commands import Resize, Ticket
from ..wire.messages import PoolResized, ResizePool

log = logging.getLogger(__name__)

Send = Callable[[TaskId, object], None]


@dataclass(slots=True)
class _Resizing:
    """A resize sent, waiting for the subtasks that have not said their pool runs it."""

    ticket: Ticket[int]
    processes: int
    awaiting: set[TaskId]


class PoolSizes:
    """The function pools' sizes in effect, by operator uid (only those resized since the start)."""

    def __init__(self, job: JobGraph) -> None:
        self.job = job
        self.sizes: dict[str, int] = {}
        self._resend = False  # an attempt started: its tasks get the sizes at the next poll
        self._resizing: dict[str, _Resizing] = {}  # by operator uid

    def attempt_started(self) -> None:
        self._resend = bool(self.sizes)

    def flush(self, send: Send | None) -> None:
        """Send the sizes in effect to a new attempt's tasks (once they exist: the desk's poll)."""
        if not self._resend or send is None:
            return
        self._resend = False
        for uid, processes in self.sizes.items():
            self._send(send, uid, processes)

    def resize(self, ticket: Ticket[int], send: Send | None) -> None:
        command = ticket.command
        assert isinstance(command, Resize)
        found = [op for v in self.job.vertices for op in v.chain if op.uid == command.uid]
        if send is None:
            ticket.fail(EpochalError(f"job {self.job.name!r} is not running; no resize"))
        elif not found:
            ticket.fail(EpochalError(f"no operator with uid {command.uid!r} in job {self.job.name!r}"))
        elif not isinstance(found[0], RecordFnSpec) or found[0].processes == 0:
            ticket.fail(EpochalError(f"operator {command.uid!r} runs no process pool: give its map, filter or "
                                     "flat_map processes=n to resize it live"))
        else:
            earlier = self._resizing.pop(command.uid, None)
            if earlier is not None:
                earlier.ticket.fail(EpochalError(
                    f"resize of {command.uid!r} to {earlier.processes} overtaken by one to {command.processes}"))
            self.sizes[command.uid] = command.processes
            tasks = self._send(send, command.uid, command.processes)
            self._resizing[command.uid] = _Resizing(ticket, command.processes, set(tasks))

    def reported(self, message: PoolResized) -> None:
        """A subtask's pool runs its new size: the resize is done once every subtask's does."""
        resizing = self._resizing.get(message.uid)
        if resizing is None or message.processes != resizing.processes:
            return  # a size re-sent after a restart, or one a newer resize replaced
        resizing.awaiting.discard(message.task)
        if not resizing.awaiting:
            del self._resizing[message.uid]
            log.info("job %r: operator %r runs %d processes per subtask", self.job.name, message.uid,
                     message.processes)
            resizing.ticket.finish(result=message.processes)

    def stop(self, why: str) -> None:
        """The attempt ends: resizes still waiting for their pools are told why (the sizes stay)."""
        for uid, resizing in self._resizing.items():
            resizing.ticket.fail(EpochalError(
                f"resize of {uid!r} to {resizing.processes} not confirmed: {why} before every pool ran it "
                "(the size stays in effect: the next attempt's subtasks run it)"))
        self._resizing.clear()

    def _send(self, send: Send, uid: str, processes: int) -> list[TaskId]:
        sent = []
        for vertex in self.job.vertices:
            if any(op.uid == uid for op in vertex.chain):
                for subtask in range(vertex.parallelism):
                    sent.append(TaskId(vertex.id, subtask))
                    send(sent[-1], ResizePool(uid, processes))
        return sent
