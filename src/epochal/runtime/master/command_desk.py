"""The job master's command desk: each command to a running job, handled by its own kind.

Commands are requests, not interrupts (`JobControl`): the job master polls the desk between
the host's steps, and the desk hands each `Command` to the handler of its type. A live query
goes to the subtask that owns the key (`live_queries`); a move to the migrations (key groups
move at checkpoint barriers: `migrations`); a savepoint triggers an aligned checkpoint and is
copied out once it completes; a patch is staged at its operator's subtasks and switched in
at a checkpoint barrier (`patches`); a rescale moves key groups onto or off standby subtasks live
where it can, and otherwise triggers an aligned checkpoint from which the host relaunches the
job at the new parallelism (rescaling by restore, dissertation §4.2: no record the checkpoint
covers is replayed). Whatever waits for a checkpoint is finished when it completes, fails when
it is aborted or subsumed, and is abandoned with a reason when the attempt ends, so no caller
waits forever (Flink's completion futures).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from ...errors import CheckpointError, EpochalError
from ...plan.job_graph import JobGraph
from ...state.savepoints import create_savepoint
from ...state.storage import CheckpointStorage
from ..checkpoints import AbortedCheckpoint, CompletedCheckpoint
from ..commands import Move, Patch, Query, Rescale, Resize, Savepoint, Ticket
from ..wire.messages import StateAnswer
from .attempt import Attempt
from .control import JobControl, JobState
from .coordinator import CheckpointCoordinator
from .live_queries import LiveQueries
from .migrations import Migrations
from .patches import PatchLog
from .pools import PoolSizes

log = logging.getLogger(__name__)


class RescaleByRestore(Exception):  # noqa: N818 - an instruction to the host, not an error
    """Raised out of a host once a rescale's checkpoint is complete: relaunch from it at
    `parallelism` (`cluster.launcher` does)."""

    def __init__(self, checkpoint_id: int, parallelism: int, ticket: Ticket[int | None]) -> None:
        super().__init__(f"rescale to {parallelism} from checkpoint {checkpoint_id}")
        self.checkpoint_id = checkpoint_id
        self.parallelism = parallelism
        self.ticket = ticket

    def done(self, control: JobControl, parallelism: int) -> None:
        """The job restored the rescale's checkpoint at `parallelism`: say so to its caller."""
        control.publish(parallelism=parallelism)
        self.ticket.finish(result=self.checkpoint_id)


class CommandDesk:
    """Takes a job's commands from its `JobControl` and sees each through.

    Args:
        job: the job graph.
        control: where commands wait and the status is published.
        storage: the job's checkpoint storage; None refuses what needs a checkpoint.
        migrations: the job master's live moves and rescales.
    """

    def __init__(self, job: JobGraph, control: JobControl, storage: CheckpointStorage | None,
                 migrations: Migrations) -> None:
        self.job = job
        self.control = control
        self.storage = storage
        self.migrations = migrations
        self.live_queries = LiveQueries()  # live state queries waiting for their task's answer
        self._waiting: dict[int, Ticket[Any]] = {}  # checkpoint id → the command waiting for it
        self._relaunch: RescaleByRestore | None = None  # a rescale whose checkpoint is complete
        self._attempt: Attempt | None = None
        self.patches: PatchLog | None = None  # the job master's live logic patches
        self._handlers: dict[type, Callable[[Any], None]] = {
            Query: self._query, Move: self._move, Rescale: self._rescale, Savepoint: self._savepoint,
            Patch: self._patch, Resize: self._resize,
        }
        self.pools = PoolSizes(job)  # function pools' sizes (vertical elasticity)

    def attempt_started(self, attempt: Attempt) -> None:
        self._attempt = attempt
        self.pools.attempt_started()

    def poll(self) -> None:
        """Hosts call this between steps (through the job master): act on the next command.

        Raises:
            RescaleByRestore: a rescale's checkpoint is complete; the host stops its tasks and
                lets it out, and `cluster.launcher` relaunches the job from it.
        """
        if self._relaunch is not None:
            relaunch, self._relaunch = self._relaunch, None
            self.stop("the job is rescaling")  # a move or savepoint begun since: its attempt ends here
            log.warning("job %r: rescaling to %d from checkpoint %d", self.job.name, relaunch.parallelism,
                        relaunch.checkpoint_id)
            self.control.publish(state=JobState.RESTARTING)
            raise relaunch
        self.pools.flush(self._attempt.send if self._attempt is not None else None)
        ticket = self.control.next_command()
        if ticket is not None:
            self._handlers[type(ticket.command)](ticket)

    # -- the handlers ----------------------------------------------------------------------------
    def _query(self, ticket: Ticket[dict[str, Any]]) -> None:
        query = ticket.command
        assert isinstance(query, Query) and query.live  # a committed query is read where it is asked
        if self._attempt is None:
            ticket.fail(EpochalError(f"job {self.job.name!r} is not running; no live state"))
        else:
            self.live_queries.ask(self.job, ticket, self._attempt.send, self._attempt.coordinator.routing)

    def _move(self, ticket: Ticket[int]) -> None:
        if not self._refused_while_waiting(ticket):
            self.migrations.move(ticket, self._coordinator())

    def _rescale(self, ticket: Ticket[int | None]) -> None:
        command = ticket.command
        assert isinstance(command, Rescale)
        n, job = command.parallelism, self.job
        if self._refused_while_waiting(ticket):
            return
        if n > job.max_parallelism:
            ticket.fail(ValueError(f"parallelism must be at most max_parallelism ({job.max_parallelism}), got {n}"))
            return
        slots = self.control.task_slots
        if slots is not None and n > slots:  # refused before any checkpoint: the job runs on as it is
            ticket.fail(EpochalError(f"a rescale to {n} needs {n} task slots; the cluster has {slots}"))
            return
        coordinator = self._coordinator()
        if n == self.control.status().parallelism and not self.migrations.busy:
            # where it runs already: nothing moves, nothing restarts
            completed = coordinator.completed if coordinator is not None else []
            ticket.finish(result=completed[-1].checkpoint_id if completed else None)
            return
        if not self.migrations.rescale(ticket, coordinator, n):  # onto standby subtasks, no restart
            self._checkpoint_for(ticket)

    def _patch(self, ticket: Ticket[int]) -> None:
        """Stage a live logic patch at its operator's subtasks (`master.patches`)."""
        coordinator = self._coordinator()
        assert self.patches is not None
        if self.migrations.busy:  # its checkpoint would switch while groups are on their way
            ticket.fail(EpochalError("key groups are moving; no patch until they moved"))
            return
        ending = coordinator is None or coordinator.is_stopped or coordinator.final_checkpoint is not None
        self.patches.submit(ticket, self._attempt.send if self._attempt is not None else None, self.storage, ending)

    def _resize(self, ticket: Ticket[int]) -> None:
        """Resize an operator's function pools, at every subtask at once (`master.pools`)."""
        self.pools.resize(ticket, self._attempt.send if self._attempt is not None else None)

    def _savepoint(self, ticket: Ticket[str]) -> None:
        if not self._refused_while_waiting(ticket):
            self._checkpoint_for(ticket)

    def _refused_while_waiting(self, ticket: Ticket[Any]) -> bool:
        """A rerouting checkpoint completing first would subsume a savepoint's or a rescale's:
        no move or rescale while one waits."""
        if isinstance(ticket.command, (Move, Rescale)) and self._waiting:
            waiting = next(iter(self._waiting.values())).command.kind
            ticket.fail(EpochalError(f"a {waiting} is under way; no {ticket.command.kind} until its checkpoint "
                                     "completed"))
            return True
        return False

    def _checkpoint_for(self, ticket: Ticket[Any]) -> None:
        """Trigger the aligned checkpoint (restorable at any parallelism) that `ticket` waits for."""
        kind, coordinator = ticket.command.kind, self._coordinator()
        if self.migrations.busy:  # its checkpoint would miss the groups on their way
            ticket.fail(EpochalError(f"key groups are moving; no {kind} until they moved"))
        elif self.storage is None:
            ticket.fail(EpochalError(f"a {kind} needs CheckpointConfig(directory=...)"))
        elif coordinator is None or coordinator.is_stopped or coordinator.final_checkpoint is not None:
            ticket.fail(EpochalError(f"job {self.job.name!r} is ending; no {kind} now"))
        else:
            self._waiting[coordinator.trigger(aligned=True)] = ticket

    def _coordinator(self) -> CheckpointCoordinator | None:
        return self._attempt.coordinator if self._attempt is not None else None

    # -- what the attempt tells the job master ---------------------------------------------------
    def checkpoint_completed(self, checkpoint: CompletedCheckpoint) -> None:
        completed = checkpoint.checkpoint_id
        for older in [cid for cid in self._waiting if cid < completed]:  # subsumed: never completes
            waiting = self._waiting.pop(older)
            waiting.fail(CheckpointError(f"checkpoint {older} for the {waiting.command.kind} was subsumed by "
                                         f"checkpoint {completed}, which completed first"))
        ticket = self._waiting.pop(completed, None)
        if ticket is None:
            return
        command = ticket.command
        if isinstance(command, Rescale):
            self._relaunch = RescaleByRestore(completed, command.parallelism, ticket)
            return
        assert isinstance(command, Savepoint) and self.storage is not None
        try:  # on the job master's thread: the checkpoint must not be dropped by retention meanwhile
            savepoint = create_savepoint(self.storage, completed, command.target)
        except (EpochalError, OSError) as exc:
            ticket.fail(exc)
        else:
            log.info("job %r: savepoint of checkpoint %d at %s", self.job.name, completed, command.target)
            ticket.finish(result=savepoint.location or command.target)

    def checkpoint_aborted(self, checkpoint: AbortedCheckpoint) -> None:
        ticket = self._waiting.pop(checkpoint.checkpoint_id, None)
        if ticket is not None:
            ticket.fail(CheckpointError(
                f"checkpoint {checkpoint.checkpoint_id} for the {ticket.command.kind} was aborted: "
                f"{checkpoint.reason.value}" + (f" ({checkpoint.detail})" if checkpoint.detail else "")))

    def state_answered(self, answer: StateAnswer) -> None:
        self.live_queries.answered(answer)

    def stop(self, why: str) -> None:
        """The attempt ends: whatever waits on it is told why."""
        self.live_queries.abandon(why)
        self.migrations.abandon(why)
        if self.patches is not None:
            self.patches.stop(why)
        self.pools.stop(why)
        for checkpoint_id, ticket in self._waiting.items():
            ticket.fail(EpochalError(f"{ticket.command.kind} abandoned: {why} before checkpoint {checkpoint_id} "
                                     "completed"))
        self._waiting.clear()
