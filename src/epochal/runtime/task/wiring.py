"""Wiring a job graph into tasks and channels, for any host.

Every channel is named by a `ChannelKey` (edge, producer subtask, consumer subtask), the same in
every process, so a host decides per key whether the channel is a local queue or a TCP stream,
and both ends agree on what they are talking about.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from ...plan.job_graph import JobGraph, TaskId
from ...plan.loops import LoopScope, loop_scopes, scope_inputs
from ...plan.specs import IterationHeadSpec, PartitionKind
from ...state.manifest import Manifest
from ...state.storage import CheckpointStorage
from ..clock import Clock
from ..routing import routing_for
from ..wire.channel import LocalChannel
from .file_merging import SnapshotMerger
from .input_gate import InputChannel
from .loop_probes import ScopeRounds
from .output_gate import OutputChannel, OutputGate
from .partition import Partitioner
from .setup import TaskSetup
from .task import Task


@dataclass(frozen=True, slots=True)
class ChannelKey:
    """Channel of edge `edge` from subtask `source` of its producer to subtask `target`."""

    edge: int
    source: int
    target: int


@dataclass(frozen=True, slots=True)
class ChannelEnds:
    """The producer's and the consumer's end of one channel (one object for a local queue)."""

    output: OutputChannel | None
    input: InputChannel | None


def channel_keys(job: JobGraph) -> list[ChannelKey]:
    """Every channel of the job, in a fixed order (its index is the channel's wire id)."""
    keys: list[ChannelKey] = []
    for e_idx, edge in enumerate(job.edges):
        src, dst = job.vertex(edge.source), job.vertex(edge.target)
        for i in range(src.parallelism):
            targets = [i] if edge.partitioning.kind is PartitionKind.FORWARD else range(dst.parallelism)
            keys.extend(ChannelKey(e_idx, i, j) for j in targets)
    return keys


def merger_for(job: JobGraph, storage: CheckpointStorage | None, background: Any, owner: str) -> SnapshotMerger | None:
    """The merged checkpoint files of a process's tasks, if the job merges them (`CheckpointConfig.merge_files`)."""
    if storage is None or not job.config.checkpoint.merge_files:
        return None
    return SnapshotMerger(storage, background, owner)


def local_channels(job: JobGraph) -> dict[ChannelKey, ChannelEnds]:
    """Local queues for every channel: the whole job in one process."""
    capacity = job.config.channel_capacity
    out = {}
    for key in channel_keys(job):
        elastic = job.edges[key.edge].is_back_edge
        ch = LocalChannel(capacity, f"e{key.edge}:{key.source}->{key.target}", elastic)
        out[key] = ChannelEnds(ch, ch)
    return out


def build_tasks(
    job: JobGraph,
    task_ids: Iterable[TaskId],
    channels: Mapping[ChannelKey, ChannelEnds],
    clock: Clock,
    storage: CheckpointStorage | None,
    restore_from: Manifest | None,
    send: Callable[[Any], None],
    background: Any,
    merger: SnapshotMerger | None = None,
) -> dict[TaskId, Task]:
    """The tasks `task_ids` of the job, each wired to its ends of `channels`; with `merger`
    they write their checkpoints into the process's merged files (`file_merging`)."""
    tasks: dict[TaskId, Task] = {}
    routing = routing_for(job, restore_from)
    keyed = job.keyed_vertices()
    inputs_of: dict[tuple[int, int], list[ChannelKey]] = {}  # (vertex, subtask) → its input channels
    for key in channels:  # once: asking every channel for every task is quadratic in subtasks
        inputs_of.setdefault((job.edges[key.edge].target, key.target), []).append(key)
    scopes = loop_scopes(job)
    for task_id in task_ids:
        vertex = job.vertex(task_id.vertex)
        i = task_id.subtask
        input_keys = inputs_of.get((vertex.id, i), [])
        inputs = [_present(channels[key].input) for key in input_keys]
        back_edges = frozenset(n for n, key in enumerate(input_keys) if job.edges[key.edge].is_back_edge)
        loop_inputs = frozenset(n for n, key in enumerate(input_keys) if job.edges[key.edge].in_loop)
        second_inputs = frozenset(n for n, key in enumerate(input_keys) if job.edges[key.edge].input == 1)
        mine = [scope for scope in scopes.values() if vertex.id in scope.members]
        rounds = {scope.head: _rounds(scope, job, vertex.id, [key.edge for key in input_keys]) for scope in mine}
        gate_edges: list[tuple[Partitioner, list[OutputChannel]]] = []
        loop_edges: dict[int, set[int]] = {scope.head: set() for scope in mine}
        head_edges = set()
        for e_idx, edge in enumerate(job.edges):
            if edge.source != vertex.id:
                continue
            for scope in mine:
                if e_idx in scope.edges:
                    loop_edges[scope.head].add(len(gate_edges))
            target = job.vertex(edge.target)
            if isinstance(target.chain[0], IterationHeadSpec):
                head_edges.add(len(gate_edges))
            if edge.partitioning.kind is PartitionKind.FORWARD:
                outs = [_present(channels[ChannelKey(e_idx, i, i)].output)]
            else:
                outs = [_present(channels[ChannelKey(e_idx, i, j)].output) for j in range(target.parallelism)]
            owners = None
            if routing is not None and edge.partitioning.kind is PartitionKind.KEY_GROUP \
                    and target.parallelism == routing.parallelism:
                owners = routing.owners
            partitioner = Partitioner(
                edge.partitioning, len(outs), i, job.max_parallelism, target.chain[0].name, owners
            )
            gate_edges.append((partitioner, outs))
        setup = TaskSetup(
            task_id, vertex, job.max_parallelism, job.config.batch_size, clock, storage,
            restore_from, send, background, job.config.state, job.config.checkpoint.mode == "unaligned",
            routing if routing is not None and vertex.parallelism == routing.parallelism else None,
            vertex.id in keyed, merger,
        )
        output = OutputGate(gate_edges, {loop: frozenset(p) for loop, p in loop_edges.items()}, frozenset(head_edges),
                            vertex.id if vertex.id in scopes else None)
        tasks[task_id] = Task(setup, inputs, output, back_edges, loop_inputs, second_inputs, rounds)
    return tasks


def _rounds(scope: LoopScope, job: JobGraph, vertex: int, inputs: list[int]) -> ScopeRounds:
    """A task's part in `scope`'s probe rounds, from the edges its input channels belong to."""
    outside = frozenset(ch for ch, edge in enumerate(inputs) if edge not in scope.edges)
    return ScopeRounds(scope.head, scope.head == vertex, scope_inputs(scope, job, vertex, inputs), outside)


T = TypeVar("T")


def _present(end: T | None) -> T:
    """A channel end this process must have: the wiring asked only for its own ends."""
    assert end is not None, "a task's channel end lives in another process"
    return end
