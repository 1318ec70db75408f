"""Live state queries: the value a key has now, asked of the subtask that owns it.

Queryable state (dissertation §4.3) has two reads. Read-committed answers from the last complete
checkpoint (`JobControl.query_state`): the state that the committed output agrees with, read on
the caller's thread from the checkpoint's files, so it never costs the job anything. A *live*
read answers from the running job: the job master routes the question to the subtask whose key
groups hold the key (`key_group_of` → `subtask_of_key_group`, the same routing the records
take), the task answers between two batches on its own thread (so the answer is a state its
records left, never half an update), and the job master hands the answer to the waiting caller.
This is the read-uncommitted isolation level of §4.3: a live value may be ahead of every sink,
since it includes records of the epoch in flight, which a failure would roll back and replay.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ...errors import EpochalError, NoCheckpointError
from ...plan.job_graph import JobGraph, TaskId
from ...state.keygroups import RoutingTable, key_group_of, subtask_of_key_group
from ..commands import Query, Ticket
from ..wire.messages import QueryState, StateAnswer


def owner_of(job: JobGraph, operator: str, key: Any, routing: RoutingTable | None = None) -> TaskId:
    """The subtask whose key groups hold `key` in the operator with uid `operator` (by `routing`,
    the table of the newest checkpoint, for vertices of its parallelism).

    Raises:
        NoCheckpointError: the job has no operator with that uid (as for a committed read).
    """
    for vertex in job.vertices:
        if any(op.uid == operator for op in vertex.chain):
            group = key_group_of(key, job.max_parallelism)
            if routing is not None and routing.parallelism == vertex.parallelism:
                return TaskId(vertex.id, routing.owners[group])
            return TaskId(vertex.id, subtask_of_key_group(group, vertex.parallelism, job.max_parallelism))
    raise NoCheckpointError(f"job {job.name!r} has no operator uid {operator!r}; it has {job.operator_uids()}")


class LiveQueries:
    """The live queries of a job master that wait for their answers."""

    def __init__(self) -> None:
        self._waiting: dict[int, Ticket[dict[str, Any]]] = {}
        self._next = 0

    def ask(self, job: JobGraph, command: Ticket[dict[str, Any]], send: Callable[[TaskId, object], None],
            routing: RoutingTable | None = None) -> None:
        """Send `command`'s question to the key's owner; the command finishes with its answer."""
        query = command.command
        assert isinstance(query, Query)
        try:
            owner = owner_of(job, query.uid, query.key, routing)
        except EpochalError as exc:
            command.finish(error=exc)
            return
        self._next += 1
        self._waiting[self._next] = command
        send(owner, QueryState(self._next, query.uid, query.key))

    def answered(self, answer: StateAnswer) -> None:
        command = self._waiting.pop(answer.query, None)
        if command is None:
            return  # asked of an attempt that has ended since
        if answer.error is None:
            command.finish(result=answer.values)
        else:
            command.finish(error=EpochalError(f"state query at {answer.task}: {answer.error}"))

    def abandon(self, why: str) -> None:
        """The attempt ended: its tasks will not answer."""
        for command in self._waiting.values():
            command.finish(error=EpochalError(f"state query abandoned: {why}"))
        self._waiting.clear()
