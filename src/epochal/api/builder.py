"""GraphBuilder: the one writer of the logical graph a stream program records.

Streams, joins, windows, side outputs and sources all add their nodes here, so what holds for
every node is written once: an operator's name is the one the user gave (checked) or a new
unique one; an edge says which input it feeds; a node changes (its spec, name, uid or
parallelism) only through these methods, while the program is being built. Readers (the
compiler, the checks that look upstream for event time) read `graph`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from ..plan.logical import LogicalEdge, LogicalGraph
from ..plan.specs import OperatorSpec
from ..validation import check_name


class GraphBuilder:
    """Adds and changes the nodes of one environment's `LogicalGraph`."""

    def __init__(self) -> None:
        self.graph = LogicalGraph()

    def name(self, name: str | None, base: str) -> str:
        """The operator name a user gave (checked), or a new unique one made from `base`."""
        return self.graph.unique_name(base) if name is None else check_name("name", name)

    def add(self, make: Callable[[str], OperatorSpec], base: str, name: str | None, *inputs: LogicalEdge) -> int:
        """Add the node `make(its name)` fed by `inputs`; returns its id."""
        return self.add_spec(make(self.name(name, base)), *inputs)

    def add_spec(self, spec: OperatorSpec, *inputs: LogicalEdge) -> int:
        """Add a node whose spec is already named (by `name`)."""
        return self.graph.add(spec, list(inputs)).id

    def spec(self, node_id: int) -> OperatorSpec:
        return self.graph.nodes[node_id].spec

    def update(self, node_id: int, **changes: Any) -> None:
        """Change fields of a node's spec (a window that emits its late records, a side output read)."""
        node = self.graph.nodes[node_id]
        node.spec = replace(node.spec, **changes)

    def parallelism(self, node_id: int) -> int | None:
        return self.graph.nodes[node_id].parallelism

    def set_parallelism(self, node_id: int, parallelism: int | None) -> None:
        self.graph.nodes[node_id].parallelism = parallelism

    def rename(self, node_id: int, *, name: str | None = None, uid: str | None = None) -> None:
        self.graph.rename(node_id, name=name, uid=uid)

    def close_loop(self, head: int, feedback: LogicalEdge) -> None:
        """The feedback edge into a loop's head, known only once the loop's body is built."""
        self.graph.nodes[head].inputs.append(feedback)

    def mark(self) -> tuple[int, dict[str, int]]:
        """Where the graph is now, for `rewind` (SQL's EXPLAIN plans a query, then takes it back)."""
        return len(self.graph.nodes), dict(self.graph._name_counts)

    def rewind(self, mark: tuple[int, dict[str, int]]) -> None:
        """Drop every node added since `mark` (nothing may read them: no stream built on them
        survives) and the names they took."""
        nodes, names = mark
        del self.graph.nodes[nodes:]
        self.graph._name_counts.clear()
        self.graph._name_counts.update(names)
