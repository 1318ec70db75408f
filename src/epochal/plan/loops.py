"""The loops of a job graph and how they nest: each loop's scope (dissertation ch. 6, structured loops).

`iterate` closes a loop with a feedback edge into its head; an `iterate` inside a loop's body
nests a loop in it. The dissertation gives every loop its own *scope* (§6.3.3): the operators
between the head and the back edge, with progress tracked per scope. Here a scope is computed
from the job graph: the head, every vertex on a path from the head to a source of one of the
head's back edges (inner loops' back edges count as paths: an inner loop lies inside the outer
one's body), and the edges between them. A vertex may be in several scopes, nested; the
innermost loop that holds a head is its parent.

Termination probes (`runtime.task.loop_probes`) and loop-aware watermarks travel a scope's edges;
a task takes its part in each scope it is in, which `scope_inputs` tells it.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import GraphError
from .job_graph import JobGraph
from .specs import AssignTimestampsSpec, IterationHeadSpec, KeyedWindowSpec


@dataclass(frozen=True, slots=True)
class LoopScope:
    """One loop: its head vertex, the vertices and edges inside it, the loop it is nested in."""

    head: int  # the loop head's vertex: the loop's id
    members: frozenset[int]  # vertices, the head included
    edges: frozenset[int]  # indices into `JobGraph.edges` whose both ends are members
    back_edges: frozenset[int]  # the edges that close this loop (into its head)
    parent: int | None  # the head of the innermost loop this one lies in
    depth: int  # 0 for an outermost loop


@dataclass(frozen=True, slots=True)
class ScopeInputs:
    """A task's inputs that carry one scope's probes, split by how a round waits for them.

    `required`: a round goes on once it arrived on each of these. `lagged`: the back edges of
    the loop the task heads, when the scope is an enclosing loop: waiting for the outer round
    there would wait for the task itself (the round goes round the inner loop first), so a
    round waits there for the previous round instead (`loop_termination` says why that suffices).
    """

    required: frozenset[int]
    lagged: frozenset[int]


def loop_scopes(job: JobGraph) -> dict[int, LoopScope]:
    """Every loop of `job`, by head vertex."""
    back_by_head: dict[int, set[int]] = {}
    succ: dict[int, list[int]] = {}
    pred: dict[int, list[int]] = {}
    for i, edge in enumerate(job.edges):
        if edge.is_back_edge:
            back_by_head.setdefault(edge.target, set()).add(i)
        else:
            succ.setdefault(edge.source, []).append(edge.target)
            pred.setdefault(edge.target, []).append(edge.source)
    # first the paths from each head to its back edges' sources without going round any loop ...
    members: dict[int, set[int]] = {
        head: (_closure(succ, [head]) & _closure(pred, [job.edges[i].source for i in backs])) | {head}
        for head, backs in back_by_head.items()
    }
    # ... then each loop takes in the loops whose head lies on those paths: they nest in it
    changed = True
    while changed:
        changed = False
        for head, inside in members.items():
            for other, theirs in members.items():
                if other != head and other in inside and head not in theirs and not theirs <= inside:
                    inside |= theirs
                    changed = True
    scopes: dict[int, LoopScope] = {}
    for head, inside in members.items():
        outer = [h for h, m in members.items() if h != head and head in m and head not in members[head] - m]
        outer = [h for h in outer if inside < members[h]]
        parent = min(outer, key=lambda h: len(members[h])) if outer else None
        edges = frozenset(i for i, e in enumerate(job.edges) if e.source in inside and e.target in inside)
        scopes[head] = LoopScope(head, frozenset(inside), edges, frozenset(back_by_head[head]), parent, len(outer))
    return scopes


def scope_inputs(scope: LoopScope, job: JobGraph, vertex: int, inputs: list[int]) -> ScopeInputs:
    """How a task of `vertex`, whose input channels belong to the edges `inputs` (by channel
    index), takes part in `scope`'s rounds."""
    required, lagged = set(), set()
    for channel, edge_index in enumerate(inputs):
        if edge_index not in scope.edges:
            continue
        edge = job.edges[edge_index]
        if edge.is_back_edge and edge.target == vertex and vertex != scope.head:
            lagged.add(channel)
        else:
            required.add(channel)
    return ScopeInputs(frozenset(required), frozenset(lagged))


def check_loop_time(job: JobGraph) -> None:
    """A loop with event time bounds what its inner loops hold by their own rounds: each of
    them needs event time too (`runtime.task.loop_clock`); and what windows would hold inside
    it for later is not in its rounds, so it holds none.

    Raises:
        GraphError: naming the loop with event time and the inner loop without.
    """
    scopes = loop_scopes(job)

    def head(v: int) -> IterationHeadSpec:
        spec = job.vertex(v).chain[0]
        assert isinstance(spec, IterationHeadSpec)
        return spec

    for scope in scopes.values():
        outer = head(scope.head)
        if outer.event_time is None:
            continue
        for v in sorted(scope.members):
            for op in job.vertex(v).chain:
                if isinstance(op, (KeyedWindowSpec, AssignTimestampsSpec)):
                    raise GraphError(
                        f"operator {op.name!r} is inside loop {outer.name!r}, which tracks event time: "
                        "windows and timestamp assigners inside such a loop are not supported (what "
                        "they hold for later is not in the loop's progress); put them before or after it"
                    )
        for inner in scopes.values():
            if inner.head != scope.head and inner.head in scope.members and head(inner.head).event_time is None:
                raise GraphError(
                    f"loop {outer.name!r} tracks event time (iterate(timestamp=...)) but the loop "
                    f"{head(inner.head).name!r} inside it does not: give it a timestamp= too"
                )


def _closure(graph: dict[int, list[int]], starts: list[int]) -> set[int]:
    seen, todo = set(starts), list(starts)
    while todo:
        for nxt in graph.get(todo.pop(), ()):
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return seen
