"""Parallel recovery: a dead worker's key groups restored by the peers that back it up.

ChronoStream §III-E: when a container is lost, the job master asks the peers holding backups of
its slices to rebuild them, each the slices whose backup it holds, in parallel and from local
copies, and moves them on later. Epochal restores every task from the last complete checkpoint
(ABS recovers a consistent cut: the other workers roll back too, each from its own local
copies), but the restore's routing table gives the dead worker's key groups to its backup
holders (`state.backups.holders`), spread over them; its new process starts owning none.
Once every task runs, the job master moves the groups back to it live (`runtime.master.migrations`),
so the recovery's pause is the holders' restore, not a restart of the dead worker's share
from remote storage, and the job ends balanced as before.

Only jobs whose key groups can move live qualify (`migration.refusal`); the others restore with
the checkpoint's table, the dead worker's new process reading its groups as before.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass

from ...plan.job_graph import JobGraph
from ...state.keygroups import RoutingTable
from ...state.manifest import Manifest
from ..routing import current_table, keyed_parallelism, refusal, routing_for


@dataclass(frozen=True, slots=True)
class RecoveryPlan:
    """The table to restore with, and the moves that give the lent key groups back."""

    table: RoutingTable
    give_back: dict[int, int]  # key group → the subtask it was taken from


def recovery_plan(
    job: JobGraph, restore_from: Manifest | None, lost: Collection[int], holders_of: Callable[[int], list[int]],
) -> RecoveryPlan | None:
    """Where the key groups of the `lost` subtasks are restored (each lost subtask's groups dealt
    round robin over its live holders); None when there is nothing to restore or the groups
    cannot move while the job runs."""
    if restore_from is None or refusal(job, has_storage=True) is not None:
        return None
    parallelism = keyed_parallelism(job)
    assert parallelism is not None
    table = current_table(job, routing_for(job, restore_from))
    moves: dict[int, int] = {}
    give_back: dict[int, int] = {}
    for subtask in sorted(lost):
        peers = [h for h in holders_of(subtask) if h not in lost and h < parallelism]
        groups = list(table.key_groups_of(subtask))
        if not peers or not groups:
            continue
        for i, group in enumerate(groups):
            moves[group] = peers[i % len(peers)]
            give_back[group] = subtask
    if not moves:
        return None
    return RecoveryPlan(table.moved(moves), give_back)
