"""The dead-letter path: from every operator with `on_error=DEAD_LETTER` to the job's sink.

Such an operator emits its dead letters in its output batches, wrapped (`DeadLetter`), as a
window operator emits its late records. Before the job graph is built, two splits are put
behind it: one passes its records on to the operators that consumed it, the other keeps its dead
letters, and the letters of every such operator go (through a union, if there are several) to
a sink operator writing to the environment's `dead_letter` sink. The letters are then ordinary
records of the job: checkpointed in flight by the barriers, and committed by the sink's two
phases with the checkpoint that covers them, exactly once.

The splits run with the operator's parallelism on forward edges: on Spark on the same worker,
so the operator's output is not copied over the network; its chain ends at the operator, so its
consumers are one local channel further away than without a dead-letter policy.
"""

from __future__ import annotations

from typing import Any

from ..errors import GraphError
from .logical import LogicalEdge, LogicalGraph, LogicalNode
from .specs import OnError, OutputPart, SinkSpec, SplitLateSpec, UnionSpec

DEAD_LETTERS = "dead_letters"  # the sink operator's name and uid (its uid names its state)


def dead_letter_operators(graph: LogicalGraph) -> list[LogicalNode]:
    return [n for n in graph.nodes if getattr(n.spec, "on_error", None) is OnError.DEAD_LETTER]


def route_dead_letters(graph: LogicalGraph, sink: Any) -> LogicalGraph:
    """`graph` with its dead-letter path added; `graph` itself when no operator has one.

    The result is a new graph (the program's stays as it was built): node ids are renumbered
    so that every node still comes after its inputs, as the compiler expects.

    Raises:
        GraphError: an operator dead-letters records but there is no dead-letter sink.
    """
    senders = dead_letter_operators(graph)
    if not senders:
        return graph
    if sink is None:
        raise GraphError(
            f"operator {senders[0].spec.name!r} has on_error='dead_letter' but the job has no dead-letter sink: "
            "StreamEnvironment(dead_letter=<any Sink>)"
        )
    sending = {n.id for n in senders}
    new_id: dict[int, int] = {}
    for node in graph.nodes:  # room for two splits after every sender
        new_id[node.id] = len(new_id) + 2 * sum(1 for s in sending if s < node.id)
    out = LogicalGraph()
    taken = {n.spec.name for n in graph.nodes}

    def name(base: str) -> str:
        candidate, n = base, 1
        while candidate in taken:
            n += 1
            candidate = f"{base}_{n}"
        taken.add(candidate)
        return candidate

    def source_of(old: int) -> int:  # a sender's consumers read its records split
        return new_id[old] + 1 if old in sending else new_id[old]

    letters: list[int] = []
    for node in graph.nodes:
        inputs = [LogicalEdge(source_of(e.source), e.partitioning, e.feedback, e.input) for e in node.inputs]
        added = out.add(node.spec, inputs)
        assert added.id == new_id[node.id]
        added.parallelism = node.parallelism
        if node.id in sending:
            for part in (OutputPart.RECORDS, OutputPart.DEAD_LETTERS):
                split_name = name(f"{node.spec.name}-{part.value}")
                split = out.add(SplitLateSpec(split_name, split_name, part), [LogicalEdge(added.id, None)])
                split.parallelism = node.parallelism  # equal: a forward edge, on the same worker
            letters.append(split.id)
    if len(letters) > 1:
        union_name = name(f"{DEAD_LETTERS}-union")
        union = out.add(UnionSpec(union_name, union_name), [LogicalEdge(i, None) for i in letters])
        letters = [union.id]
    sink_name = name(DEAD_LETTERS)
    out.add(SinkSpec(sink_name, sink_name, sink), [LogicalEdge(letters[0], None)])
    return out


__all__ = ["DEAD_LETTERS", "dead_letter_operators", "route_dead_letters"]
