"""Live key-group migration: key groups change owner at a checkpoint barrier, nothing stops.

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
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..plan.job_graph import JobGraph, TaskId
from ..plan.specs import SourceSpec
from ..state.keygroups import KeyGroups, RoutingTable, key_group_set
from ..state.manifest import Manifest
from ..state.sections import GroupCopies, KeyedGroups
from ..state.storage import CheckpointStorage
from .fault_points import fault_point
from .gc_tuning import freeze_long_lived
from .operators import KeyedOperator, RuntimeOperator
from .split_handover import discovery_interval
from .task.snapshots import PreparedGroups, prepare_groups, read_groups

if TYPE_CHECKING:  # the job master's command; control imports the coordinator, which imports this
    from .master.control import Command

log = logging.getLogger(__name__)


# The share of the time a new owner's read-ahead may spend decoding: it unpickles the state that
# moves (~300 ms for a quarter of 1 GB) on a thread of its own while the task thread processes
# input, one at a time under the GIL. The GIL changes hands between frames, so the task thread
# waits a few milliseconds at most (measured: 7 ms worst, unpaced, beside a busy thread); the
# pacing bounds how much of its time the read-ahead takes from a loaded worker, at the price of a
# longer read-ahead (nothing waits on it but the move itself).
READ_AHEAD_SHARE = 0.25


class Pacer:
    """Runs units of work so that they take at most `share` of the time: sleeps after each in
    proportion to how long it ran (reading files, which leaves the GIL free, is not paced).

    In a worker process that froze its start-up objects out of the collector's sight
    (`gc_tuning`), what a unit decoded joins them (`freeze_long_lived`): a quarter of 1 GB
    decoded is a million tracked objects that would otherwise fill the young generation every
    50,000 allocations and be scanned there, under the GIL (measured: five collections of 33 to
    48 ms through one move, each a stall of the task thread). The state is long-lived and
    acyclic; it is still freed by reference counting when its group moves on. What the task
    thread allocated meanwhile is frozen too: records and batches are acyclic, and a cycle among
    them would wait for the job's end (`tuned_gc` unfreezes).
    """

    def __init__(self, share: float) -> None:
        self.rest = (1.0 - share) / share

    def __call__(self, work: Callable[[], None]) -> None:
        start = time.perf_counter()
        work()
        freeze_long_lived()
        time.sleep((time.perf_counter() - start) * self.rest)


@dataclass(frozen=True, slots=True)
class PendingAdoption:
    """A new owner waiting for checkpoint `checkpoint_id` to complete: then it reads `gained`,
    and answers the live state queries that came meanwhile."""

    checkpoint_id: int
    owned: KeyGroups  # what it owns once it has them
    gained: KeyGroups
    queries: list[Any] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class Handover:
    """What one subtask does at a rerouting barrier: keep `kept` at once, adopt `gained` later."""

    kept: KeyGroups
    gained: KeyGroups
    owned: KeyGroups
    lost: KeyGroups


def handover(current: KeyGroups, table: RoutingTable, subtask: int) -> Handover:
    """How subtask `subtask`, owning `current`, moves to `table`."""
    owned = table.key_groups_of(subtask)
    return Handover(
        key_group_set(g for g in current if g in owned),
        key_group_set(g for g in owned if g not in current),
        owned,
        key_group_set(g for g in current if g not in owned),
    )


class KeyGroupOwner:
    """A task's key groups and those on their way to it: the task's side of a migration.

    Args:
        key_groups: what the task owns at start.
        chain: the task's operators; keyed ones change what they hold (`reassign`).
        subtask: the task's subtask index.
        keyed_parallelism: the vertex's parallelism if records reach it by key group, else None
            (its key groups never move).
    """

    def __init__(self, key_groups: KeyGroups, chain: Sequence[RuntimeOperator], subtask: int,
                 keyed_parallelism: int | None) -> None:
        self.key_groups = key_groups
        self.chain = chain
        self.subtask = subtask
        self.keyed_parallelism = keyed_parallelism
        self.pending: PendingAdoption | None = None  # groups moving here: the task takes no input
        self.prepared: PreparedGroups | None = None  # groups read ahead of their move (pre-copy)
        self.early: Manifest | None = None  # the old owners' part of a rerouting checkpoint not reached yet

    def preparation(self, manifest: Manifest, table: RoutingTable,
                    storage: CheckpointStorage | None) -> Callable[[], PreparedGroups | None]:
        """The read-ahead of the groups `table` moves here, from `manifest`, to run off the
        processing path; it gives None if it fails (the adoption then reads everything)."""
        gained = handover(self.key_groups, table, self.subtask).gained
        uids = [op.uid for op in self.chain if isinstance(op, KeyedOperator)]

        def work() -> PreparedGroups | None:
            try:
                return prepare_groups(storage, manifest, uids, gained, Pacer(READ_AHEAD_SHARE))
            except Exception:  # noqa: BLE001 - a cache: a file dropped by retention meanwhile, say
                log.warning("reading key groups %s ahead failed; the job master asks again or they are read as "
                            "they move", gained, exc_info=True)
                return None

        return work

    def reroute(self, checkpoint_id: int, table: RoutingTable) -> None:
        """The rerouting barrier went out, its snapshot fixed: drop what moves away, and wait for
        what moves here (steps 3 and 4 of the module docstring)."""
        if self.keyed_parallelism != table.parallelism:
            return
        move = handover(self.key_groups, table, self.subtask)
        if len(move.lost):
            fault_point("migration.barrier")  # tests: die with the barrier sent, the groups still here
            self._own(move.kept, {})
            fault_point("migration.dropped")  # tests: die with the groups dropped, the snapshot unwritten
        if len(move.gained):
            self.pending = PendingAdoption(checkpoint_id, move.owned, move.gained)

    def adopt(self, manifest: Manifest, storage: CheckpointStorage | None,
              max_parallelism: int) -> PendingAdoption | None:
        """The old owners' part of the rerouting checkpoint (`manifest`) is durable: read the
        groups that moved here from it and own them (step 5); the adoption done, or None if none
        waited for this checkpoint."""
        pending = self.pending
        if pending is None or pending.checkpoint_id != manifest.checkpoint_id:
            if pending is None or pending.checkpoint_id < manifest.checkpoint_id:
                self.early = manifest  # the old owners were quicker than its barrier here: kept until it
            return None
        prepared, self.prepared, self.early = self.prepared, None, None
        gained = {op.uid: read_groups(storage, manifest, op.uid, pending.gained, prepared)
                  for op in self.chain if isinstance(op, KeyedOperator)}
        fault_point("migration.adopting")  # tests: die with the moved groups read, not yet taken over
        self._own(pending.owned, gained)
        self.pending = None
        return pending

    def _own(self, owned: KeyGroups, gained: dict[str, tuple[KeyedGroups, GroupCopies]]) -> None:
        self.key_groups = owned
        for op in self.chain:
            state, copies = gained.get(op.uid, ({}, {}))
            op.reassign(owned, state, copies)


def keyed_parallelism(job: JobGraph) -> int | None:
    """The parallelism of the job's keyed vertices, if they share one (a routing table applies to
    them all); None if the job has no keyed vertex or they differ (key groups cannot move)."""
    keyed = {job.vertex(v).parallelism for v in job.keyed_vertices()}
    return keyed.pop() if len(keyed) == 1 else None


def routing_for(job: JobGraph, restore_from: Manifest | None) -> RoutingTable | None:
    """The routing table an attempt starts with: the checkpoint's, if it was made for these
    keyed vertices; else ranges over their active subtasks when some stand by; else None (every
    vertex routes by contiguous ranges over all its subtasks)."""
    parallelism = keyed_parallelism(job)
    if parallelism is None:
        return None
    table = restore_from.routing if restore_from is not None else None
    if table is not None and table.parallelism == parallelism and table.max_parallelism == job.max_parallelism:
        return table
    active = {job.vertex(v).active_parallelism for v in job.keyed_vertices()}.pop()
    if active < parallelism:
        return RoutingTable.contiguous(active, job.max_parallelism, parallelism)
    return None  # a rescale by restore: ranges over the new parallelism


def plan_moves(table: RoutingTable, moves: Mapping[int, int]) -> RoutingTable:
    """The next table, refusing a move that moves nothing."""
    newer = table.moved(moves)
    if not table.changes(newer):
        raise ValueError("the moves leave every key group where it is")
    return newer


def balanced_moves(table: RoutingTable, active: int) -> dict[int, int]:
    """Moves that spread the key groups evenly over subtasks `0..active-1`, moving as few as it
    can: groups of subtasks past `active` and of overfull subtasks go to the emptiest ones."""
    if not 1 <= active <= table.parallelism:
        raise ValueError(f"active subtasks must be in [1, {table.parallelism}], got {active}")
    m = table.max_parallelism
    quota = [m // active + (1 if s < m % active else 0) for s in range(active)]
    owned: list[list[int]] = [[] for _ in range(table.parallelism)]
    for group, owner in enumerate(table.owners):
        owned[owner].append(group)
    loose: list[int] = []
    for subtask, groups in enumerate(owned):
        keep = quota[subtask] if subtask < active else 0
        loose.extend(groups[keep:])
        del groups[keep:]
    moves: dict[int, int] = {}
    for group in sorted(loose):
        target = min(range(active), key=lambda s: (len(owned[s]) - quota[s], s))
        owned[target].append(group)
        moves[group] = target
    return moves



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
    command: Command | None = None
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
    def plan(job: JobGraph, current: RoutingTable, table: RoutingTable, started: float, command: Command | None,
             steps: list[dict[int, int]] | None = None, parallelism: int | None = None) -> Migration:
        changes = current.changes(table).values()
        keyed = [v for v in job.keyed_vertices() if job.vertex(v).parallelism == table.parallelism]
        tasks = frozenset(TaskId(v, new) for v in keyed for _, new in changes)
        givers = {TaskId(v, old) for v in keyed for old, _ in changes}
        return Migration(table, tasks, set(tasks), started, givers, command, steps or [], parallelism)


def refusal(job: JobGraph, has_storage: bool) -> str | None:
    """Why key groups of `job` cannot move while it runs, or None."""
    if not has_storage:
        return "moving key groups needs CheckpointConfig(directory=...): the new owner reads them from a checkpoint"
    if keyed_parallelism(job) is None:
        return "the job has no keyed operators, or they run at different parallelisms"
    if any(e.is_back_edge for e in job.edges):
        return "key groups of a job with loops cannot move while it runs (rescale it instead)"
    if job.config.checkpoint.mode == "unaligned":
        return "key groups cannot move under unaligned checkpoints yet (rescale instead)"
    return None


def handover_sources(job: JobGraph, has_storage: bool) -> frozenset[int]:
    """The source vertices whose splits move in a live rescale (`runtime.split_handover`): they
    run standby subtasks at the parallelism of the keyed vertices, whose groups can move live. A
    source that does not find splits as it runs also needs periodic checkpoints: its subtasks end
    once one shows every split read (`runtime.master.split_handovers`)."""
    parallelism = keyed_parallelism(job)
    if (parallelism is None or refusal(job, has_storage) is not None
            or all(job.vertex(v).active is None for v in job.keyed_vertices())):
        return frozenset()
    periodic = job.config.checkpoint.is_periodic
    return frozenset(v.id for v in job.vertices
                     if isinstance(head := v.chain[0], SourceSpec) and v.active is not None
                     and v.parallelism == parallelism and (periodic or discovery_interval(head.source) is not None))


def current_table(job: JobGraph, routing: RoutingTable | None) -> RoutingTable:
    parallelism = keyed_parallelism(job)
    assert parallelism is not None
    return routing if routing is not None else RoutingTable.contiguous(parallelism, job.max_parallelism)
