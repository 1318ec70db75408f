"""The logical graph the API records while a program builds its streams.

Building a stream program only records data (Bytewax: "the graph is data"); `plan.compiler`
turns it into a `JobGraph`. Nodes are mutable only while the program is being built
(`set_parallelism`, `uid`, `name` act on the last node).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from .specs import OperatorSpec, Partitioning


@dataclass(slots=True)
class LogicalEdge:
    """An input of a node; `partitioning` is None where the user chose none (forward or rebalance).

    `input` is which input of a two-input operator the edge feeds (0: the first, 1: the second;
    `plan.two_inputs`); every edge into a one-input operator is input 0.
    """

    source: int
    partitioning: Partitioning | None
    feedback: bool = False  # closes a loop: declared by `iterate`, checked by the compiler
    input: int = 0


@dataclass(slots=True)
class LogicalNode:
    id: int
    spec: OperatorSpec
    inputs: list[LogicalEdge]
    parallelism: int | None = None


@dataclass(slots=True)
class LogicalGraph:
    nodes: list[LogicalNode] = field(default_factory=list)
    _name_counts: dict[str, int] = field(default_factory=dict)

    def unique_name(self, base: str) -> str:
        """`base`, or `base_2`, `base_3`, …: unique, stable, and never a name already taken."""
        taken = {node.spec.name for node in self.nodes}
        n = self._name_counts.get(base, 0)
        while True:
            n += 1
            candidate = base if n == 1 else f"{base}_{n}"
            if candidate not in taken:
                self._name_counts[base] = n
                return candidate

    def add(self, spec: OperatorSpec, inputs: list[LogicalEdge]) -> LogicalNode:
        node = LogicalNode(len(self.nodes), spec, inputs)
        self.nodes.append(node)
        return node

    def rename(self, node_id: int, *, name: str | None = None, uid: str | None = None) -> None:
        node = self.nodes[node_id]
        changes: dict[str, str] = {}
        if name is not None:
            changes["name"] = name
            if node.spec.uid == node.spec.name and uid is None:
                changes["uid"] = name  # the uid follows the name until set on its own
        if uid is not None:
            changes["uid"] = uid
        node.spec = replace(node.spec, **changes)
