"""EXPLAIN: the operators a query compiles to, one line each, with the edges between them."""

from __future__ import annotations

from typing import Any

from ..plan.aggregates import KeyedAggregateSpec
from ..plan.logical import LogicalGraph
from ..plan.specs import KeyedWindowSpec, MapBatchesSpec


def _detail(spec: Any) -> str:
    if isinstance(spec, KeyedWindowSpec):
        windows = ", ".join(repr(w) for _, w in spec.queries)
        value = f" of {spec.value!r}" if isinstance(spec.value, str) else ""
        return f" {spec.kind.value}{value} per {spec.key!r} over {windows}"
    if isinstance(spec, KeyedAggregateSpec):
        calls = ", ".join(f"{c.kind.value}({c.value or '*'})" for c in spec.aggregates)
        return f" {calls} per {spec.key!r}, emit {spec.emit}"
    if isinstance(spec, MapBatchesSpec) and spec.event_time is not None:
        return f" (event time {spec.event_time.field!r} from here on)"
    return ""


def describe(graph: LogicalGraph, first: int, relation: Any, query: str) -> str:
    """The nodes from `first` on (what planning the query added), in the order they were added."""
    lines = ["== SQL ==", query.strip(), "== operators (uid, kind, inputs) =="]
    for node in graph.nodes[first:]:
        kind = type(node.spec).__name__.removesuffix("Spec")
        inputs = []
        for edge in node.inputs:
            source = graph.nodes[edge.source].spec.name
            how = f" [{edge.partitioning.kind.value}]" if edge.partitioning is not None else ""
            inputs.append(f"{source}{how}")
        arrow = f" <- {', '.join(inputs)}" if inputs else ""
        lines.append(f"{node.spec.uid}: {kind}{_detail(node.spec)}{arrow}")
    lines.append("== output schema ==")
    lines.extend(f"{f.name}: {f.type}" for f in relation.schema)
    return "\n".join(lines)
