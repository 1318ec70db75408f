"""The job master's side of vertical elasticity (ChronoStream §III-D): the size of each
operator's function pool, changed live and kept across attempts.

ChronoStream records its thread-control table, the configuration state that maps threads to
slices, with the job manager, so that a container rebuilt after a failure runs with the
threads it was given. Here that table is `PoolSizes.sizes`: a resize is sent to every subtask
of the operator at once (no barrier: a stateless function's output does not depend on how many
processes compute it), and after a restart the sizes in effect are sent again before the first
checkpoint, so a restored subtask goes on with the pool it had, not the one the job was
written with.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from ...errors import EpochalError
from ...plan.job_graph import JobGraph, TaskId
from ...plan.specs import RecordFnSpec
from ..commands import Resize, Ticket
from ..wire.messages import ResizePool

log = logging.getLogger(__name__)

Send = Callable[[TaskId, object], None]


class PoolSizes:
    """The function pools' sizes in effect, by operator uid (only those resized since the start)."""

    def __init__(self, job: JobGraph) -> None:
        self.job = job
        self.sizes: dict[str, int] = {}
        self._resend = False  # an attempt started: its tasks get the sizes at the next poll

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
            self.sizes[command.uid] = command.processes
            self._send(send, command.uid, command.processes)
            log.info("job %r: operator %r runs %d processes per subtask", self.job.name, command.uid,
                     command.processes)
            ticket.finish(result=command.processes)

    def _send(self, send: Send, uid: str, processes: int) -> None:
        for vertex in self.job.vertices:
            if any(op.uid == uid for op in vertex.chain):
                for subtask in range(vertex.parallelism):
                    send(TaskId(vertex.id, subtask), ResizePool(uid, processes))
