"""Logical graph → job graph: parallelism, partitioning and operator chaining.

An operator joins its upstream's chain (runs in the same task, records passed by a function
call) when nothing repartitions between them: a single forward input from an operator of equal
parallelism whose only consumer it is. Everywhere else an edge becomes a channel. Loops are
closed only by `iterate()`'s feedback edges; they become the job graph's back-edges, whose
records the loop head logs during a checkpoint (ABS §4.3, Algorithm 2). Any other cycle is an
error; loops may nest (`plan.loops` computes each loop's scope). Operators whose side outputs
are read get a split for their main output first (`plan.side_outputs`), keyed aggregates that
combine their local phase (`plan.local_global`), then operators that dead-letter records their
dead-letter path (`plan.dead_letters`). A two-input operator's edges say which input they feed
(`JobEdge.input`).
"""

from __future__ import annotations

from typing import Any

from ..config import JobConfig
from ..errors import GraphError
from .dead_letters import route_dead_letters
from .job_graph import JobEdge, JobGraph, JobVertex
from .local_global import insert_local_aggregates
from .logical import LogicalGraph, LogicalNode
from .loops import check_loop_time
from .side_outputs import route_side_outputs
from .specs import (
    FORWARD,
    REBALANCE,
    IterationHeadSpec,
    OperatorSpec,
    Partitioning,
    PartitionKind,
    SinkSpec,
    SourceSpec,
    UnionSpec,
)


def _check_loops(graph: LogicalGraph) -> set[tuple[int, int]]:
    """The back-edges of the graph: declared feedback edges that close a loop.

    Without its feedback edges the graph must be acyclic (a cycle anywhere else is an error);
    a depth-first search that enters each loop through its head then finds exactly the
    feedback edges as back-edges (ABS §4.3: back-edges point to a vertex on the DFS path).
    """
    consumers: dict[int, list[int]] = {n.id: [] for n in graph.nodes}
    for node in graph.nodes:
        for edge in node.inputs:
            if not edge.feedback:
                consumers[edge.source].append(node.id)
            elif not isinstance(node.spec, IterationHeadSpec):
                raise GraphError(f"operator {node.spec.name!r}: only a loop head takes feedback")

    WHITE, GREY, BLACK = 0, 1, 2
    colour = [WHITE] * len(graph.nodes)
    for root in graph.nodes:
        if colour[root.id] != WHITE:
            continue
        colour[root.id] = GREY
        stack = [(root.id, iter(consumers[root.id]))]
        while stack:
            node_id, children = stack[-1]
            for child in children:
                if colour[child] == GREY:
                    a, b = graph.nodes[node_id].spec.name, graph.nodes[child].spec.name
                    raise GraphError(
                        f"the stream graph has a cycle ({a!r} -> {b!r}); "
                        "close loops with DataStream.iterate()"
                    )
                if colour[child] == WHITE:
                    colour[child] = GREY
                    stack.append((child, iter(consumers[child])))
                    break
            else:
                colour[node_id] = BLACK
                stack.pop()

    def reaches(start: int, goal: int) -> bool:
        seen, todo = {start}, [start]
        while todo:
            n = todo.pop()
            if n == goal:
                return True
            for c in consumers[n]:
                if c not in seen:
                    seen.add(c)
                    todo.append(c)
        return False

    back: set[tuple[int, int]] = set()
    for node in graph.nodes:
        for edge in node.inputs:
            if edge.feedback and reaches(node.id, edge.source):
                back.add((edge.source, node.id))
    return back


def _reachable(edges: list[tuple[int, int]], start: int) -> set[int]:
    succ: dict[int, list[int]] = {}
    for a, b in edges:
        succ.setdefault(a, []).append(b)
    seen, todo = {start}, [start]
    while todo:
        for nxt in succ.get(todo.pop(), ()):
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return seen


def _resolve_partitioning(
    upstream_parallelism: int, parallelism: int, chosen: Partitioning | None, name: str
) -> Partitioning:
    if chosen is None:
        return FORWARD if upstream_parallelism == parallelism else REBALANCE
    if chosen.kind is PartitionKind.FORWARD and upstream_parallelism != parallelism:
        raise GraphError(
            f"operator {name!r}: forward partitioning needs equal parallelism on both sides "
            f"({upstream_parallelism} -> {parallelism}); use rebalance()"
        )
    return chosen


def compile_job(
    graph: LogicalGraph,
    name: str,
    default_parallelism: int,
    max_parallelism: int,
    config: JobConfig,
    dead_letter: Any = None,
) -> JobGraph:
    """Build the job graph of a program; raises GraphError on an invalid program.

    `dead_letter` is the job's dead-letter sink (an `epochal.Sink`), where operators with
    `on_error=DEAD_LETTER` send the records they fail on.
    """
    graph = route_dead_letters(insert_local_aggregates(route_side_outputs(graph)), dead_letter)
    nodes = graph.nodes
    if not any(isinstance(n.spec, SinkSpec) for n in nodes):
        raise GraphError("the job has no sink: add one with DataStream.sink_to(...)")
    back_edges = _check_loops(graph)
    _check_unique(nodes)

    # With standby slots, operators at the default parallelism run `max_workers` subtasks, of which
    # the first `default_parallelism` start with work: a live rescale moves work onto the others.
    physical = max(default_parallelism, config.max_workers or 0)
    active: dict[int, int | None] = {}
    parallelism: dict[int, int] = {}
    for node in nodes:  # nodes are created after their inputs: already in topological order
        p = node.parallelism or physical
        active[node.id] = default_parallelism if node.parallelism is None and physical > default_parallelism else None
        if not 1 <= p <= max_parallelism:
            raise GraphError(
                f"operator {node.spec.name!r}: parallelism {p} must be in [1, {max_parallelism}]"
            )
        parallelism[node.id] = p

    consumers: dict[int, int] = {n.id: 0 for n in nodes}
    for node in nodes:
        for edge in node.inputs:
            consumers[edge.source] += 1

    edges_in: dict[int, list[tuple[int, Partitioning, bool, int]]] = {}
    for node in nodes:
        edges_in[node.id] = [
            (
                e.source,
                _resolve_partitioning(
                    parallelism[e.source], parallelism[node.id], e.partitioning, node.spec.name
                ),
                (e.source, node.id) in back_edges,
                e.input,
            )
            for e in node.inputs
        ]

    # Chaining: node joins the chain of its single upstream when the edge is forward, the
    # upstream has no other consumer, and neither is a union (which merges several inputs). A
    # two-input operator has two inputs, so it always heads its chain (`plan.two_inputs`).
    chain_of: dict[int, list[int]] = {}
    head_of: dict[int, int] = {}
    for node in nodes:
        inputs = edges_in[node.id]
        if (
            len(inputs) == 1
            and inputs[0][1].kind is PartitionKind.FORWARD
            and consumers[inputs[0][0]] == 1
            and not isinstance(node.spec, (SourceSpec, UnionSpec, IterationHeadSpec))
            and not isinstance(nodes[inputs[0][0]].spec, SinkSpec)
        ):
            head = head_of[inputs[0][0]]
            chain_of[head].append(node.id)
            head_of[node.id] = head
        else:
            chain_of[node.id] = [node.id]
            head_of[node.id] = node.id

    vertex_of: dict[int, int] = {}
    vertices: list[JobVertex] = []
    for head, members in chain_of.items():  # insertion order is topological
        vid = len(vertices)
        for m in members:
            vertex_of[m] = vid
        chain: tuple[OperatorSpec, ...] = tuple(nodes[m].spec for m in members)
        vertices.append(JobVertex(vid, chain, parallelism[head], active[head]))

    raw = [
        (vertex_of[src], vertex_of[node_id], part, back, input_index)
        for node_id, inputs in edges_in.items()
        for src, part, back, input_index in inputs
        if head_of[node_id] == node_id
    ]
    pairs = [(a, b) for a, b, _, _, _ in raw]
    reach = {v.id: _reachable(pairs, v.id) for v in vertices}
    edges = [  # an edge is inside a loop iff its target reaches its source again
        JobEdge(a, b, part, is_back_edge=back, in_loop=a in reach[b], input=input_index)
        for a, b, part, back, input_index in raw
    ]
    job = JobGraph(name, tuple(vertices), tuple(edges), max_parallelism, config)
    check_loop_time(job)
    return job


def _check_unique(nodes: list[LogicalNode]) -> None:
    for attr in ("name", "uid"):
        seen: set[str] = set()
        for node in nodes:
            value = getattr(node.spec, attr)
            if value in seen:
                raise GraphError(f"two operators share the {attr} {value!r}; {attr}s must be unique")
            seen.add(value)
