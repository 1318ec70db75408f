"""Survivors without a rollback: when a worker is lost, only its tasks restore and replay.

ABS recovers a consistent cut by rolling every task back (ABS §5). ChronoStream (§III-B, §III-E)
recovers only the lost slices: each keeps a progress vector (how many events of each input it
consumed, by their sequence numbers) with its backup, its upstream replays from there, and
downstream drops the duplicates. Epochal does the same per channel, at the last complete
checkpoint `n` (`RecoveryConfig(survivors=True)`; the worker's side: `cluster.survivors`):

- **into the lost tasks**: every output channel to another worker keeps what it sent since the
  barrier of the last complete checkpoint (an *upstream log*, dropped up to each barrier whose
  checkpoint completes). The lost tasks restore checkpoint `n` (their state, and their sources'
  positions, at its barrier, which they had consumed everything before); each survivor replays
  to them what it sent after barrier `n`, then goes on live;
- **out of the lost tasks**: a survivor counts the records each input channel delivered since
  the barrier of `n` (the channel's sequence numbers; the counts at a barrier are the
  survivor's progress vector there), and drops that many from the front of what the restored
  task sends again. That is exact only if the restored task sends *the same records in the same
  order* after barrier `n` as the lost one did: so the lost tasks whose output reaches a
  survivor must be replayable: a source that reads at most one split per subtask, chained only
  with record-by-record operators (map, filter, flat_map, map_batches, assign_timestamps). A
  task that merges inputs, holds state, or fires timers sends in an order the interleaving of its
  inputs decides, which no one logged; a survivor that consumed such output depends on a
  history the restore cannot repeat, and the job rolls back as a whole instead (the plan says
  why). In the usual shape, sources shuffle by key into keyed operators whose output stays on
  their worker (to a sink), which qualifies.

Meanwhile the survivors run on: their output to the lost worker goes into the log only, and the
checkpoints that were pending are aborted (an alignment waiting for a dead input is given up);
new checkpoints wait until the survivors have dropped every duplicate (a barrier inside a
replayed prefix would cut it differently at each end). Sinks keep what survivors staged: it is
committed with the next checkpoint, once, as after any aborted checkpoint.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from ...plan.job_graph import JobGraph, JobVertex
from ...plan.specs import (
    AssignTimestampsSpec,
    MapBatchesSpec,
    PartitionKind,
    RecordFnSpec,
    SourceSpec,
)
from ...state.manifest import Manifest

_RECORD_BY_RECORD = (RecordFnSpec, MapBatchesSpec, AssignTimestampsSpec)


@dataclass(frozen=True, slots=True)
class SurvivorPlan:
    """Restore only the `lost` workers' tasks, from checkpoint `checkpoint_id`."""

    lost: frozenset[int]
    checkpoint_id: int


def survivor_plan(job: JobGraph, restore_from: Manifest | None, lost: Collection[int], workers: int,
                  *, discovering: bool, busy: str | None) -> SurvivorPlan | str:
    """The plan for losing the workers `lost` (subtask `i` of every vertex runs on worker `i`),
    or why every task rolls back instead.

    Args:
        restore_from: the latest complete checkpoint of the job's lineage.
        workers: the stage's workers.
        discovering: the job has sources that find splits as they run (their assignments since
            the checkpoint are not replayed to a restored subtask).
        busy: what the job master has under way that a partial restore would cut (a move of key
            groups, a patch), if anything.
    """
    config = job.config
    if not config.recovery.survivors:
        return "RecoveryConfig(survivors=True) is not set"
    if restore_from is None:
        return "there is no complete checkpoint to restore the lost tasks from"
    if config.checkpoint.mode != "aligned":
        return f"checkpoints are {config.checkpoint.mode}, not aligned"
    if any(e.is_back_edge for e in job.edges):
        return "the job has loops (what goes round depends on the interleaving of a head's inputs)"
    if discovering:
        return "a source finds splits as it runs"
    if busy is not None:
        return busy
    if restore_from.routing is not None or any(v.active is not None for v in job.vertices):
        return "key groups were moved or stand by (the restore's table may not be the survivors')"
    survivors = set(range(workers)) - set(lost)
    if not survivors:
        return "no worker survived"
    for edge in job.edges:
        if edge.partitioning.kind is PartitionKind.FORWARD:
            continue  # subtask i to subtask i: on one worker
        source, target = job.vertex(edge.source), job.vertex(edge.target)
        for subtask in sorted(set(lost) & set(range(source.parallelism))):
            if not survivors & set(range(target.parallelism)):
                continue
            why = _unreplayable(source, subtask)
            if why is not None:
                return f"{source.name} [{subtask + 1}] sends to surviving subtasks of {target.name} and {why}"
    return SurvivorPlan(frozenset(lost), restore_from.checkpoint_id)


def _unreplayable(vertex: JobVertex, subtask: int) -> str | None:
    """Why subtask `subtask` of `vertex` might send other records, or in another order, after a
    restore than it did (None: it sends the same)."""
    first = vertex.chain[0]
    if not isinstance(first, SourceSpec):
        return "is not a source (its output's order depends on how its inputs interleaved)"
    others = [op.name for op in vertex.chain[1:] if not isinstance(op, _RECORD_BY_RECORD)]
    if others:
        return f"chains {others[0]!r}, which is not record by record"
    splits = len(first.source.splits())
    mine = sum(1 for i in range(splits) if i % vertex.parallelism == subtask)
    if mine > 1:
        return f"reads {mine} splits (in an order the time of each read decides)"
    return None
