"""Side outputs: the main output of an operator split from the streams its tags name.

A function sends a record to a side output with `ctx.output(tag, record)`; the operator emits it
in its output batch, wrapped with its tag (`runtime.operators.side_outputs.Tagged`), as a
window operator emits its late records and an operator its dead letters. `stream.side_output(tag)`
adds a `SideOutputSpec(tag)` behind the operator, which keeps that tag's records, unwrapped,
and records the tag in the operator's spec (`side_outputs`): an operator wraps only the tags
someone reads, so with none read its output is what it was without side outputs.

Before the job graph is built, an operator whose side outputs are read gets one more split,
`SideOutputSpec(None)`, in front of its other consumers: it drops the tagged records. The splits
run at the operator's parallelism on forward edges (on Spark on the same worker, so the output
is not copied over the network); the operator's chain ends at it, so its consumers are one local
channel further away than without side outputs, and what follows a split chains to it. Where no
side output is read nothing changes. Side outputs are
ordinary records of the job from there on: checkpointed in flight by the barriers and committed
by the sinks with the checkpoint that covers them, exactly once.

Dead letters are the job's one implicit side output: `plan.dead_letters` runs after this and
splits them off in the same way.
"""

from __future__ import annotations

from .logical import LogicalEdge, LogicalGraph
from .specs import SideOutputSpec

RESERVED_PREFIX = "__"  # tags of the system's own side outputs (a join's late records)


def side_output_sources(graph: LogicalGraph) -> dict[int, set[int]]:
    """Per operator whose side outputs are read: the ids of the nodes that read them."""
    readers: dict[int, set[int]] = {}
    for node in graph.nodes:
        if isinstance(node.spec, SideOutputSpec) and node.spec.tag is not None:
            readers.setdefault(node.inputs[0].source, set()).add(node.id)
    return readers


def route_side_outputs(graph: LogicalGraph) -> LogicalGraph:
    """`graph` with a main-output split behind every operator whose side outputs are read and
    that has other consumers; `graph` itself when there is none.

    The result is a new graph (the program's stays as it was built), renumbered so that every
    node still comes after its inputs, as the compiler expects.
    """
    readers = side_output_sources(graph)
    needs_split = {
        source for source, sides in readers.items()
        if any(e.source == source and node.id not in sides for node in graph.nodes for e in node.inputs)
    }
    if not needs_split:
        return graph
    taken = {n.spec.name for n in graph.nodes} | {n.spec.uid for n in graph.nodes}
    # ids after the splits go in, each right behind its operator: inputs still come first
    new_id = {n.id: n.id + sum(1 for s in needs_split if s < n.id) for n in graph.nodes}
    out = LogicalGraph()
    for node in graph.nodes:
        inputs = []
        for e in node.inputs:
            main = e.source in needs_split and node.id not in readers[e.source]
            source = new_id[e.source] + 1 if main else new_id[e.source]
            inputs.append(LogicalEdge(source, e.partitioning, e.feedback, e.input))
        added = out.add(node.spec, inputs)
        assert added.id == new_id[node.id]
        added.parallelism = node.parallelism
        if node.id in needs_split:
            name = _unique(f"{node.spec.name}-main", taken)
            split = out.add(SideOutputSpec(name, name, None), [LogicalEdge(added.id, None)])
            split.parallelism = node.parallelism  # equal: a forward edge, chained
    return out


def _unique(base: str, taken: set[str]) -> str:
    candidate, n = base, 1
    while candidate in taken:
        n += 1
        candidate = f"{base}_{n}"
    taken.add(candidate)
    return candidate


__all__ = ["RESERVED_PREFIX", "route_side_outputs", "side_output_sources"]
