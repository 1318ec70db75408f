"""Live key-group migration: key groups change owner at a checkpoint barrier, nothing stops.

The protocol, and the job master's side of it; a task's side is `task.key_group_owner`.

ChronoStream §III-C moves a slice while both old and new owner run it ("dual mode") and
filters duplicates downstream by sequence number. Epochal moves it at an epoch boundary instead
(dissertation §3.4, epochs; the handover Megaphone batches), which needs no sequence numbers and
keeps every committed epoch with exactly one owner per key group:

1. The job master picks the moves, makes routing table version v+1 and triggers an aligned
   checkpoint n whose barriers carry it (`Barrier.reroute`).
2. Every task forwards barrier n, then switches its key-group partitioners to v+1: FIFO
   channels put every record before the barrier on the old owner, every one after it on the
   new one.
3. An old owner snapshots at n with the moving groups (its snapshot still holds them), then
   drops them from its live state.
4. A new owner snapshots at n without them, then takes no input until it has them: the moving
   groups' records after barrier n wait in its channels, in order, as do watermarks.
5. Once every old owner acknowledged n (its snapshot with the moving groups is durable), the
   job master sends their part of n's manifest to the new owners (`AdoptKeyGroups`), which
   read the moving groups from the old owners' files of n (the restore path, for the groups
   only), and go on, most often before n completes: what they emit after barrier n belongs to
   epoch n+1, which commits only after n (waiting for the whole checkpoint held their input
   back for as long as its slowest task took to write).
6. Checkpoint n completes; its manifest records table v+1.

Failure anywhere before n completes restores n-1 with v: the old owners, their state, their
input; what a new owner did since is never committed. After it, n with v+1. A checkpoint n that
is aborted fails the attempt (its tasks have already switched), which is the same restore of
n-1. While a migration is under way, until n completed and the groups were taken over, no other
checkpoint starts (periodic, final, a savepoint's or a rescale's), so none can complete with a
new owner's state missing.

Checkpoints stay incremental through a move (`KeyedStateBackend.reassign`): an old owner's next
delta replaces the groups it lost by nothing, a new owner's replaces the groups it gained by the
old owner's sections of them, copied as bytes (`state.sections.ResetSection`), and a
restore reads from a subtask's chain only the groups the subtask held at that checkpoint.

The job master turns a
`Move` or a live rescale into steps sized by state (`migration_steps`, Megaphone's
batches). For each step it first has the new owners read their groups ahead from the latest
complete checkpoint, off their processing path (pre-copy: ChronoStream §III-C rebuilds a slice
from its backup before rerouting), then triggers the rerouting checkpoint, hands the old owners'
part of it to the new owners as soon as it is durable (they read only what was written since the
read-ahead), and starts the next step once they all took over and the checkpoint completed.
Only one migration runs at a time, and none survives its attempt. A step that changes the
active subtasks also hands source splits over (`runtime.master.split_handovers`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ...errors import EpochalError
from ...plan.job_graph import JobGraph, TaskId
from ...state.keygroups import RoutingTable
from ...state.manifest import Manifest
from ..checkpoints import CompletedCheckpoint
from ..commands import Move, Ticket
from ..routing import balanced_moves, current_table, keyed_parallelism, plan_moves, refusal
from ..wire.messages import AcknowledgeCheckpoint, AdoptKeyGroups, KeyGroupsAdopted, KeyGroupsPrepared, PrepareKeyGroups
from .control import JobControl
from .coordinator import CheckpointCoordinator
from .migration_steps import group_bytes, plan_steps
from .split_handovers import SplitHandovers

log = logging.getLogger(__name__)
READ_AGAIN = 3  # times a new owner is asked again to read its groups ahead, after a failed read


@dataclass(frozen=True, slots=True)
class _NextSteps:
    """Steps of a move waiting for checkpoint `after`, which writes the last step's groups at
    their new owners while those run: else the next step's rerouting checkpoint would, while
    they hold their input back (measured at 1 GB: 64 MB of copies, 140 to 340 ms per step).

    After the last step (no `steps` left) the move's command waits for it too: the next move
    reads ahead from the newest complete checkpoint, and the rerouting one still shows the groups
    at their old owners (measured at 1 GB: a rescale 2 -> 1 right after 1 -> 2 read 500 MB
    while its input waited, 8.2 s)."""

    after: int
    steps: list[dict[int, int]]
    command: Ticket[Any] | None
    parallelism: int | None
    moved_at: int  # the rerouting checkpoint of the last step taken


class Migrations:
    """Moves of key groups while the job runs, on the job master."""

    def __init__(self, job: JobGraph, control: JobControl, has_storage: bool) -> None:
        self.job = job
        self.control = control
        self.has_storage = has_storage
        self.current: Migration | None = None
        self.waiting: _NextSteps | None = None  # between two steps of a move
        self.send: Callable[[TaskId, object], None] | None = None  # to the attempt's tasks
        self.splits = SplitHandovers(job, has_storage)  # source splits, and when sources end

    @property
    def busy(self) -> bool:
        """Whether key groups are moving: a step under way, or steps left to move."""
        return self.current is not None or self.waiting is not None

    @property
    def standby(self) -> bool:
        """Whether the keyed operators run standby subtasks (`max_workers`): a rescale up to them is live."""
        return any(self.job.vertex(v).active is not None for v in self.job.keyed_vertices())

    def parallelism(self, routing: RoutingTable | None) -> int:
        """The parallelism the job runs at: its keyed operators' active subtasks, once they stand by."""
        return routing.active if routing is not None and self.standby else self.job.parallelism

    def move(self, command: Ticket[int], coordinator: CheckpointCoordinator | None) -> None:
        """Move key groups (`command.command`, a `Move`) at checkpoint barriers."""
        why = refusal(self.job, self.has_storage)
        if why is None and (coordinator is None or coordinator.is_stopped or coordinator.final_checkpoint is not None):
            why = f"job {self.job.name!r} is not running, or is ending"
        if why is None and self.busy:
            why = "key groups are moving already"
        if why is not None:
            command.finish(error=EpochalError(why))
            return
        assert coordinator is not None
        request = command.command
        try:
            if not isinstance(request, Move):
                raise TypeError(f"expected a Move, got {request!r}")
            plan_moves(current_table(self.job, coordinator.routing), dict(request.moves))  # refused before any step
        except (TypeError, ValueError) as exc:
            command.finish(error=ValueError(f"cannot move key groups: {exc}"))
            return
        self._next_step(coordinator, self._steps(request.moves, request.batch, coordinator), command)

    def rescale(self, command: Ticket[Any], coordinator: CheckpointCoordinator | None, parallelism: int) -> bool:
        """Rescale live if the key groups can move onto (or off) standby subtasks; False if not
        (the job master then rescales by restore)."""
        keyed = keyed_parallelism(self.job)
        if not (self.standby and keyed is not None and parallelism <= keyed and not self.busy
                and refusal(self.job, self.has_storage) is None and coordinator is not None
                and not coordinator.is_stopped and coordinator.final_checkpoint is None):
            return False
        assert coordinator is not None
        moves = balanced_moves(current_table(self.job, coordinator.routing), parallelism)
        log.info("job %r: rescaling to %d live, moving %d key group(s)", self.job.name, parallelism, len(moves))
        self._next_step(coordinator, self._steps(tuple(sorted(moves.items())), None, coordinator), command,
                        parallelism)
        return True

    def _steps(self, moves: tuple[tuple[int, int], ...], batch: int | None,
               coordinator: CheckpointCoordinator) -> list[dict[int, int]]:
        """`moves` cut into steps: of `batch` groups, else sized by the newest checkpoint's state."""
        latest = coordinator.completed[-1].manifest if coordinator.completed else None
        keyed = keyed_parallelism(self.job)
        sizes = group_bytes(latest, keyed) if latest is not None and keyed is not None else {}
        steps = plan_steps(moves, batch, sizes, self.job.config.state.migration_step_bytes)
        if len(steps) > 1:
            log.info("job %r: moving %d key group(s) in %d steps", self.job.name, len(moves), len(steps))
        return steps

    def _next_step(self, coordinator: CheckpointCoordinator, steps: list[dict[int, int]], command: Ticket[Any] | None,
                   parallelism: int | None = None, moved_at: int | None = None) -> None:
        """Trigger the checkpoint that makes the first of `steps` that moves anything; a live
        rescale (`parallelism`) publishes its new parallelism once the last step is done, and
        the command returns `moved_at` (the last step's checkpoint), else the newest one."""
        current = current_table(self.job, coordinator.routing)
        while steps:
            table = current.moved(steps.pop(0))
            if current.changes(table):
                break
        else:
            if parallelism is not None:
                self.control.publish(parallelism=parallelism)
            if moved_at is None and coordinator.completed:
                moved_at = coordinator.completed[-1].checkpoint_id
            if command is not None:
                command.finish(result=moved_at)
            return
        if self._ending(coordinator, command):
            return
        migration = self.current = Migration.plan(self.job, current, table, time.monotonic(), command, steps,
                                                  parallelism)
        migration.split_owners = self.splits.gainers(current, table)
        if coordinator.completed and self.send is not None:  # read ahead from the newest checkpoint
            latest = coordinator.completed[-1]
            migration.prepared_from = latest.checkpoint_id
            prepare = PrepareKeyGroups(latest.manifest, table)
            for task in migration.new_owners:
                self.send(task, prepare)
        else:
            self._trigger(coordinator, migration)

    def prepared(self, message: KeyGroupsPrepared, coordinator: CheckpointCoordinator | None) -> None:
        """A new owner read its groups ahead; once all did, the rerouting checkpoint starts.

        A read-ahead that failed is asked again from a newer checkpoint, if one completed since
        (at most `READ_AGAIN` times): without one, the new owner reads every moving group while
        it holds back its input (measured: 3 s at 250 MB)."""
        migration = self.current
        if migration is None or migration.checkpoint_id is not None or coordinator is None:
            return
        expected, attempts = migration.read_again.get(message.task, (migration.prepared_from, 0))
        if message.checkpoint_id != expected:
            return
        latest = coordinator.completed[-1] if coordinator.completed else None
        if (not message.read and attempts < READ_AGAIN and self.send is not None and latest is not None
                and latest.checkpoint_id > message.checkpoint_id):
            log.info("job %r: %s reads its key groups ahead again, from checkpoint %d", self.job.name,
                     message.task, latest.checkpoint_id)
            migration.read_again[message.task] = (latest.checkpoint_id, attempts + 1)
            self.send(message.task, PrepareKeyGroups(latest.manifest, migration.table))
            return
        migration.awaiting.discard(message.task)
        if not migration.awaiting and not self._ending(coordinator, migration.command):
            self._trigger(coordinator, migration)

    def _ending(self, coordinator: CheckpointCoordinator, command: Ticket[Any] | None) -> bool:
        """Whether the job is ending (its final checkpoint triggered, as its sources ended between
        two steps or during a read-ahead): then no step starts, since a rerouting checkpoint after
        the final one is never taken over, and the move ends with an error."""
        if not coordinator.is_stopped and coordinator.final_checkpoint is None:
            return False
        self.current = None
        if command is not None:
            command.finish(error=EpochalError(
                f"job {self.job.name!r} is ending; the key groups not moved yet stay where they are"))
        return True

    def _trigger(self, coordinator: CheckpointCoordinator, migration: Migration) -> None:
        current = current_table(self.job, coordinator.routing)
        migration.checkpoint_id = coordinator.trigger(reroute=migration.table)
        migration.awaiting = set(migration.new_owners)
        log.info("job %r: moving %d key group(s) at checkpoint %d", self.job.name,
                 len(current.changes(migration.table)), migration.checkpoint_id)

    def acknowledged(self, ack: AcknowledgeCheckpoint, coordinator: CheckpointCoordinator) -> None:
        """A task's part of a checkpoint is durable: once every old owner's part of the step's
        checkpoint is, its new owners read their groups from those parts, before it completes
        (`runtime.master.migrations`, step 5)."""
        migration = self.current
        if migration is None or migration.checkpoint_id != ack.checkpoint_id or migration.handed:
            return
        migration.givers.discard(ack.task)
        pending = coordinator.pending.get(ack.checkpoint_id)
        if not migration.givers and pending is not None and self.send is not None:
            self._hand(migration, pending.manifest(self.job), self.send)

    def _hand(self, migration: Migration, manifest: Manifest, send: Callable[[TaskId, object], None]) -> None:
        migration.handed = True
        adopt = AdoptKeyGroups(manifest)
        for task in migration.awaiting:
            send(task, adopt)

    def completed(self, checkpoint: CompletedCheckpoint, send: Callable[[TaskId, object], None],
                  coordinator: CheckpointCoordinator) -> None:
        """A checkpoint completed: if it is the step's, its new owners read their groups from it
        (unless they were sent its old owners' part already) and its step ends once they took
        them over; if it wrote the last step's groups at their new owners, the next step starts."""
        migration = self.current
        if migration is not None and migration.checkpoint_id == checkpoint.checkpoint_id:
            migration.checkpointed = True
            if not migration.handed:
                self._hand(migration, checkpoint.manifest, send)
            self.splits.adopt(migration.split_owners, checkpoint.manifest, send)
            if migration.taken_over:
                self._stepped(migration, coordinator)
        self.splits.completed(checkpoint.manifest, send)
        self._resume(checkpoint.checkpoint_id, coordinator)

    def aborted(self, checkpoint_id: int, coordinator: CheckpointCoordinator) -> None:
        """A checkpoint was aborted: if the next step waited for it, it starts all the same (its
        rerouting checkpoint then writes the last step's groups too)."""
        self._resume(checkpoint_id, coordinator)

    def _resume(self, checkpoint_id: int, coordinator: CheckpointCoordinator) -> None:
        waiting = self.waiting
        if waiting is not None and checkpoint_id >= waiting.after:
            self.waiting = None
            self._next_step(coordinator, waiting.steps, waiting.command, waiting.parallelism, waiting.moved_at)

    def adopted(self, message: KeyGroupsAdopted, coordinator: CheckpointCoordinator | None) -> None:
        """A new owner took over; once all did, checkpoints go on, and once one wrote the groups
        at their new owners the next step starts (or, after the last, the move returns)."""
        migration = self.current
        if migration is None or migration.checkpoint_id is None or message.checkpoint_id != migration.checkpoint_id:
            return
        migration.awaiting.discard(message.task)
        if migration.awaiting:
            return
        log.info("job %r: key groups moved at checkpoint %d in %.0f ms", self.job.name, migration.checkpoint_id,
                 (time.monotonic() - migration.started) * 1000)
        if coordinator is not None and migration.checkpointed:
            self._stepped(migration, coordinator)

    def _stepped(self, migration: Migration, coordinator: CheckpointCoordinator) -> None:
        """A step's groups were taken over and its checkpoint completed: checkpoints go on, and
        the next step, or the command's return, waits for one."""
        assert migration.checkpoint_id is not None
        self.current = None
        coordinator.migrated()  # periodic checkpoints go on
        parallelism = migration.parallelism
        if not migration.steps and parallelism is not None:
            self.control.publish(parallelism=parallelism)  # the job runs at it from here
            parallelism = None
        command = migration.command
        if not self._ending(coordinator, None):
            # the next step, or the command's return, after a checkpoint writes the groups where they went
            self.waiting = _NextSteps(coordinator.trigger(), migration.steps, command, parallelism,
                                      migration.checkpoint_id)
        elif migration.steps:
            self._ending(coordinator, command)  # the steps left never come: the move fails
        elif command is not None:
            command.finish(result=migration.checkpoint_id)  # its last step was taken

    def abandon(self, why: str) -> None:
        """The attempt ended: the migration under way ends with it (the restore decides where
        every key group is)."""
        migration, self.current = self.current, None
        waiting, self.waiting = self.waiting, None
        self.splits.abandon()
        if waiting is not None and not waiting.steps:  # every step taken: the move stands in its checkpoint
            if waiting.command is not None:
                waiting.command.finish(result=waiting.moved_at)
            waiting = None
        command = migration.command if migration is not None else waiting.command if waiting is not None else None
        if command is not None:
            command.finish(error=EpochalError(
                f"moving key groups abandoned: {why}; the restore puts every key group where the checkpoint "
                "it restores says"))


@dataclass(slots=True)
class Migration:
    """A migration step under way, on the job master: the table it moves to, its new owners, and
    the tasks it waits for: to read their groups ahead (`prepared_from`, before the rerouting
    checkpoint is triggered), then to take them over (once the old owners, `givers`, wrote
    their snapshots of `checkpoint_id`)."""

    table: RoutingTable
    new_owners: frozenset[TaskId]
    awaiting: set[TaskId]
    started: float
    givers: set[TaskId]  # old owners whose snapshot of the rerouting checkpoint is not durable yet
    command: Ticket[Any] | None = None
    steps: list[dict[int, int]] = field(default_factory=list)  # batches still to move after this one
    parallelism: int | None = None  # a live rescale's new parallelism, published once all moved
    checkpoint_id: int | None = None  # the rerouting checkpoint, once triggered
    prepared_from: int | None = None  # the checkpoint the new owners read ahead from
    read_again: dict[TaskId, tuple[int, int]] = field(default_factory=dict)  # task: (checkpoint, attempts)
    split_owners: frozenset[TaskId] = frozenset()  # source subtasks that may gain splits (`split_handover`)
    handed: bool = False  # the new owners were sent where to read their groups
    checkpointed: bool = False  # the rerouting checkpoint completed (the step ends once taken over too)

    @property
    def taken_over(self) -> bool:
        """Whether every new owner took its groups over (none is awaited since the trigger)."""
        return self.checkpoint_id is not None and not self.awaiting

    @staticmethod
    def plan(job: JobGraph, current: RoutingTable, table: RoutingTable, started: float, command: Ticket[Any] | None,
             steps: list[dict[int, int]] | None = None, parallelism: int | None = None) -> Migration:
        changes = current.changes(table).values()
        keyed = [v for v in job.keyed_vertices() if job.vertex(v).parallelism == table.parallelism]
        tasks = frozenset(TaskId(v, new) for v in keyed for _, new in changes)
        givers = {TaskId(v, old) for v in keyed for old, _ in changes}
        return Migration(table, tasks, set(tasks), started, givers, command, steps or [], parallelism)
