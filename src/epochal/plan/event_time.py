"""Which event time a stream's records carry, read off the logical graph.

Event time is a field of the record (`plan.time`). It is set where timestamps are assigned: a
source given a watermark strategy, or `assign_timestamps`; a `map_batches` may move it to another
column (`MapBatchesSpec.event_time`, watermarks unchanged). Every other operator passes it on,
since records keep their fields through most operators (a map that drops the field makes the
operator that reads it fail, naming the record). A union has an event time only when all its
inputs have the same one. Loop feedback edges are not followed: they carry what entered the loop.
"""

from __future__ import annotations

from .logical import LogicalGraph
from .specs import AssignTimestampsSpec, MapBatchesSpec, SourceSpec
from .time import EventTime


def event_time_of(graph: LogicalGraph, node_id: int) -> EventTime | None:
    """The event time of the records node `node_id` emits, or None if they have none."""
    memo: dict[int, EventTime | None] = {}
    return _of(graph, node_id, memo, set())


def _of(graph: LogicalGraph, node_id: int, memo: dict[int, EventTime | None], visiting: set[int]) -> EventTime | None:
    if node_id in memo:
        return memo[node_id]
    node = graph.nodes[node_id]
    spec = node.spec
    found: EventTime | None
    if isinstance(spec, SourceSpec):
        found = spec.watermarks.event_time if spec.watermarks is not None else None
    elif isinstance(spec, AssignTimestampsSpec):
        found = spec.watermarks.event_time
    elif isinstance(spec, MapBatchesSpec) and spec.event_time is not None:
        found = spec.event_time  # the batches carry their event time in another column from here on
    else:
        visiting.add(node_id)
        inputs = [e.source for e in node.inputs if not e.feedback and e.source not in visiting]
        times = {_of(graph, source, memo, visiting) for source in inputs}
        visiting.discard(node_id)
        found = times.pop() if len(times) == 1 else None
    memo[node_id] = found
    return found
