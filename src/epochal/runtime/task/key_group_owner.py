"""A task's key groups, and those on their way to it or away from it (live migration).

The protocol, and the job master's side of it, are in `master.migrations`. Here a task reads
the groups it is about to gain ahead, off its processing path (paced: `Pacer`), switches owner at
the rerouting barrier, and takes the moved groups over once the old owners' snapshots are durable.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ...plan.job_graph import TaskId
from ...state.keygroups import KeyGroupRange, KeyGroups, RoutingTable, key_group_set
from ...state.manifest import Manifest
from ...state.sections import GroupCopies, KeyedGroups
from ...state.storage import CheckpointStorage
from ..fault_points import fault_point
from ..gc_tuning import freeze_long_lived
from ..operators import KeyedOperator, RuntimeOperator, SourceOperator
from ..wire.messages import KeyGroupsAdopted, KeyGroupsPrepared, PrepareKeyGroups, QueryState, StateAnswer
from .checkpointer import BackgroundRunner
from .snapshots import PreparedGroups, prepare_groups, read_groups, read_operator_restore

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
    """What a task owns, key groups and source splits, and what is on its way to it.

    Args:
        key_groups: what the task owns at start.
        chain: the task's operators; keyed ones change what they hold (`reassign`).
        task_id: the task, named in what it sends the job master.
        name: the task's name, for logs.
        keyed_parallelism: the vertex's parallelism if records reach it by key group, else None
            (its key groups never move).
        storage: where the checkpoints that hand groups over are.
        max_parallelism: the job's key-group count.
        send: to the job master.
    """

    def __init__(self, key_groups: KeyGroups, chain: Sequence[RuntimeOperator], task_id: TaskId, name: str,
                 keyed_parallelism: int | None, storage: CheckpointStorage | None, max_parallelism: int,
                 send: Callable[[Any], None]) -> None:
        self.key_groups = key_groups
        self.chain = chain
        self.task_id = task_id
        self.name = name
        self.subtask = task_id.subtask
        self.keyed_parallelism = keyed_parallelism
        self.storage = storage
        self.max_parallelism = max_parallelism
        self.send = send
        self.pending: PendingAdoption | None = None  # groups moving here: the task takes no input
        self.prepared: PreparedGroups | None = None  # groups read ahead of their move (pre-copy)
        self.early: Manifest | None = None  # the old owners' part of a rerouting checkpoint not reached yet

    def prepare(self, message: PrepareKeyGroups, background: BackgroundRunner) -> None:
        """Read ahead, off the processing path, the key groups about to move here (pre-copy)."""
        checkpoint_id = message.manifest.checkpoint_id

        def done(prepared: PreparedGroups | None) -> None:
            self.prepared = prepared
            self.send(KeyGroupsPrepared(self.task_id, checkpoint_id, prepared is not None))

        background.read_ahead(self.preparation(message.manifest, message.table, self.storage), done)

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

    def adopt(self, manifest: Manifest) -> PendingAdoption | None:
        """The old owners' part of the rerouting checkpoint (`manifest`) is durable: read the
        groups that moved here from it and own them (step 5); the adoption done, or None if none
        waited for this checkpoint."""
        pending = self.pending
        if pending is None or pending.checkpoint_id != manifest.checkpoint_id:
            if pending is None or pending.checkpoint_id < manifest.checkpoint_id:
                self.early = manifest  # the old owners were quicker than its barrier here: kept until it
            return None
        prepared, self.prepared, self.early = self.prepared, None, None
        gained = {op.uid: read_groups(self.storage, manifest, op.uid, pending.gained, prepared)
                  for op in self.chain if isinstance(op, KeyedOperator)}
        fault_point("migration.adopting")  # tests: die with the moved groups read, not yet taken over
        self._own(pending.owned, gained)
        self.pending = None
        log.info("%s: took over key groups %s at checkpoint %d", self.name, pending.gained, manifest.checkpoint_id)
        self.send(KeyGroupsAdopted(self.task_id, manifest.checkpoint_id))
        return pending

    def query(self, query: QueryState) -> None:
        """A live state query, between two batches: the state as this task's records left it,
        answered once the key groups on their way here arrived (it may ask of one of them)."""
        if self.pending is not None:
            self.pending.queries.append(query)
            return
        op = next((op for op in self.chain if op.uid == query.uid), None)
        if not isinstance(op, KeyedOperator):
            self.send(StateAnswer(self.task_id, query.query, {}, f"operator uid {query.uid!r} has no keyed state"))
            return
        try:
            self.send(StateAnswer(self.task_id, query.query, op.query(query.key)))
        except Exception as exc:  # noqa: BLE001 - the answer says why; the task runs on
            self.send(StateAnswer(self.task_id, query.query, {}, f"{type(exc).__name__}: {exc}"))

    def adopt_splits(self, source: SourceOperator, manifest: Manifest) -> None:
        """Checkpoint `manifest` handed splits to `source`: their positions are in it (`runtime.splits`)."""
        if source.awaits(manifest.checkpoint_id):
            _, states = read_operator_restore(self.storage, manifest, source.uid, KeyGroupRange(0, 0),
                                              self.max_parallelism)
            gained = source.adopt(states)
            log.info("%s: took over splits %s at checkpoint %d", self.name, [s.split_id for s in gained],
                     manifest.checkpoint_id)

    def _own(self, owned: KeyGroups, gained: dict[str, tuple[KeyedGroups, GroupCopies]]) -> None:
        self.key_groups = owned
        for op in self.chain:
            state, copies = gained.get(op.uid, ({}, {}))
            op.reassign(owned, state, copies)


