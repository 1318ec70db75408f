"""Source splits in a live rescale: who reads which split, and how splits change reader.

A vertex that runs standby subtasks (`StreamEnvironment(max_workers=...)`) and shares the routing
table of the keyed vertices (`runtime.master.migrations`) reads split `i` of its split list (or of its
split log, for a source that finds splits as it runs) at subtask `i % readers`, where *readers*
is the table's active subtask count. A live rescale changes that count at a rerouting checkpoint
`n`, and the splits change owner at the same barrier (dissertation §3.4, epochs; ChronoStream
§III-B, progress as part of the snapshot):

1. Every source subtask snapshots its own splits' positions at `n` under the old owners, as at
   any checkpoint, then gives up the splits it no longer owns and stops reading them.
2. A subtask gaining splits does not read them before `n` completed: then (`AdoptSplits`) it
   takes their positions, finished marks and watermark stamps from the old owners' operator
   state in `n`'s manifest, as a restore does, for those splits only. Its watermark may be
   ahead of theirs, and the old owner no longer holds event time back for them, so ahead of
   barrier `n` it sends `NO_WATERMARK`, which sets its channels back downstream (a task's own
   watermark still only moves forward: it waits), and its watermark starts again from its
   splits once it has them.

A failure before `n` completes restores `n-1` with the old table, so the old readers; after,
`n` with the new one. A restore takes the union of every old subtask's positions and keeps the
splits `i % readers` of the table it restores: the same assignment the live switch made. Between
the barrier and the adoption no checkpoint can start (the job master sends `AdoptSplits` ahead of
any later trigger, on the same FIFO path), so every split is in exactly one subtask's snapshot of
every checkpoint.

Such a source does not end when it has nothing left to read: a rescale may still hand it
splits. It ends once the job master says no split will come (`NoMoreSplits`, from
`runtime.master.split_handovers`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ..plan.job_graph import JobVertex
from ..state.keygroups import RoutingTable


def discovery_interval(source: Any) -> float | None:
    """The source's `discovery_interval()`; None for a source without one (duck-typed)."""
    method = getattr(source, "discovery_interval", None)
    return None if method is None else method()


def may_gain_splits(vertex: JobVertex, routing: RoutingTable | None) -> bool:
    """Whether the sources of `vertex`, under `routing` (the table the attempt starts with), may
    be handed splits in a live rescale: it runs standby subtasks and the table places them. Its
    subtasks then wait for `NoMoreSplits` before they end."""
    return vertex.active is not None and routing is not None and routing.parallelism == vertex.parallelism


def readers(vertex: JobVertex, routing: RoutingTable | None) -> int:
    """How many subtasks of source `vertex` read splits: the table's active subtasks when its
    splits move with it (so a restore reads as the live rescale it continues did), else the
    vertex's own active subtasks."""
    return routing.active if may_gain_splits(vertex, routing) and routing is not None else vertex.active_parallelism


@dataclass(frozen=True, slots=True)
class SplitMove:
    """What one source subtask does when the readers change: keep, give up, wait for."""

    kept: tuple[Any, ...]
    lost: tuple[Any, ...]
    gained: tuple[Any, ...]


def split_move(splits: Iterable[Any], index: Mapping[str, int], subtask: int, before: int, after: int) -> SplitMove:
    """How subtask `subtask` moves from `before` readers to `after`, over every known split."""
    kept, lost, gained = [], [], []
    for split in splits:
        i = index[split.split_id]
        mine, will_be = i % before == subtask, i % after == subtask
        if mine and will_be:
            kept.append(split)
        elif mine:
            lost.append(split)
        elif will_be:
            gained.append(split)
    return SplitMove(tuple(kept), tuple(lost), tuple(gained))


@dataclass(frozen=True, slots=True)
class PendingSplits:
    """Splits a rerouting checkpoint moved here: read once `checkpoint_id` completed."""

    checkpoint_id: int
    splits: tuple[Any, ...]
