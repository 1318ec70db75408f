"""Local-global aggregation: a local phase in front of the key exchange of every keyed aggregate
that asks for one (`combine`), before the job graph is built.

The local phase (`LocalAggregateSpec`; `LocalWindowSpec` for windows) takes the upstream
operator's input as it was (same parallelism, a forward edge: it chains onto the upstream operator
and runs in its task, on its worker) and ships partials, keyed, over the exchange the aggregate
had; the aggregate then merges partials (`KeyedAggregateSpec.combined`, `KeyedWindowSpec.combined`;
a reduce folds reduced values as it folds records).
Flink SQL's two-phase aggregation (`LocalGroupAggregate` / `GlobalGroupAggregate`) is the model.

Which aggregates ask is decided where they are built (the API: by default where it cannot
change what is committed, i.e. with `emit="on_checkpoint"`); this pass only wires them.
"""

from __future__ import annotations

from dataclasses import replace

from .aggregates import (
    AggregateCall,
    AggregateKind,
    KeyedAggregateSpec,
    LocalAggregateSpec,
    LocalWindowSpec,
    PartialKey,
    partial_key_column,
    window_combinable,
)
from .logical import LogicalEdge, LogicalGraph, LogicalNode
from .specs import KeyedReduceSpec, KeyedWindowSpec, OperatorSpec, Partitioning, PartitionKind

Combinable = KeyedAggregateSpec | KeyedReduceSpec | KeyedWindowSpec


def _wants_local(node: LogicalNode) -> bool:
    spec = node.spec
    if not isinstance(spec, (KeyedAggregateSpec, KeyedReduceSpec, KeyedWindowSpec)) or not spec.combine:
        return False
    if isinstance(spec, (KeyedAggregateSpec, KeyedWindowSpec)) and spec.combined:
        return False
    if isinstance(spec, KeyedWindowSpec) and not window_combinable(spec):
        return False  # late records asked for after `combine` was chosen: records, not partials
    edges = node.inputs
    return len(edges) == 1 and not edges[0].feedback and edges[0].partitioning is not None and (
        edges[0].partitioning.kind is PartitionKind.KEY_GROUP)


def _local_spec(spec: Combinable, name: str, uid: str) -> OperatorSpec:
    if isinstance(spec, KeyedWindowSpec):
        assert isinstance(spec.key, str) and (spec.value is None or isinstance(spec.value, str))
        assert spec.event_time is not None  # `window_combinable`: event time only
        return LocalWindowSpec(name, uid, spec.key, spec.queries, spec.kind, spec.event_time, spec.value)
    if isinstance(spec, KeyedReduceSpec):
        call = AggregateCall(AggregateKind.REDUCE, None, spec.fn)
        until_barrier = spec.emit == "on_checkpoint"
        return LocalAggregateSpec(name, uid, spec.key, (call,), until_barrier, values_only=True,
                                  on_error=spec.on_error)
    return LocalAggregateSpec(name, uid, spec.key, spec.aggregates, spec.emit == "on_checkpoint",
                              on_error=spec.on_error)


def _global_spec(spec: Combinable) -> tuple[Combinable, Partitioning]:
    if isinstance(spec, KeyedReduceSpec):  # reduced values are keyed like the records
        return spec, Partitioning(PartitionKind.KEY_GROUP, spec.key)
    if isinstance(spec, KeyedWindowSpec):  # partial rows keep the key column
        return replace(spec, combined=True), Partitioning(PartitionKind.KEY_GROUP, spec.key)
    key = PartialKey(partial_key_column(spec.key))
    return replace(spec, key=key, combined=True), Partitioning(PartitionKind.KEY_GROUP, key)


def insert_local_aggregates(graph: LogicalGraph) -> LogicalGraph:
    """`graph` with a local phase before every aggregate that asks for one; `graph` itself when
    none does. The result is a new graph: node ids are renumbered so that every node still comes
    after its inputs (the compiler expects it), the local phase right before its aggregate."""
    wanting = {n.id for n in graph.nodes if _wants_local(n)}
    if not wanting:
        return graph
    new_id: dict[int, int] = {}
    for node in graph.nodes:  # room for a local phase ahead of every aggregate that wants one
        new_id[node.id] = len(new_id) + sum(1 for w in wanting if w <= node.id)
    taken = {n.spec.name for n in graph.nodes} | {n.spec.uid for n in graph.nodes}

    def unique(base: str) -> str:
        candidate, n = base, 1
        while candidate in taken:
            n += 1
            candidate = f"{base}_{n}"
        taken.add(candidate)
        return candidate

    out = LogicalGraph()
    for node in graph.nodes:
        inputs = [LogicalEdge(new_id[e.source], e.partitioning, e.feedback) for e in node.inputs]
        spec = node.spec
        if node.id in wanting:
            assert isinstance(spec, (KeyedAggregateSpec, KeyedReduceSpec, KeyedWindowSpec))
            upstream = graph.nodes[node.inputs[0].source]
            local = out.add(_local_spec(spec, unique(f"{spec.name}-local"), unique(f"{spec.uid}-local")),
                            [LogicalEdge(inputs[0].source, None)])
            local.parallelism = upstream.parallelism  # a forward edge: chained where it can be
            spec, partitioning = _global_spec(spec)
            inputs = [LogicalEdge(local.id, partitioning)]
        added = out.add(spec, inputs)
        assert added.id == new_id[node.id]
        added.parallelism = node.parallelism
    out._name_counts = dict(graph._name_counts)
    return out
