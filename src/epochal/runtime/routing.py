"""Routing tables of a job's keyed vertices: which subtask owns which key group.

Pure functions of the job graph, a checkpoint's table and the moves asked for; both wings read
them (the job master plans moves and recoveries, a task's partitioners route by the table).
"""

from __future__ import annotations

from collections.abc import Mapping

from ..plan.job_graph import JobGraph
from ..plan.specs import SourceSpec
from ..state.keygroups import RoutingTable
from ..state.manifest import Manifest
from .splits import discovery_interval


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
    """The source vertices whose splits move in a live rescale (`runtime.splits`): they
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
