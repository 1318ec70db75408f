"""The running operators: one class per core operator spec of `plan.specs`.

- `base`: the base class, its context and snapshot, and the guard around user code;
- `io`: sources and sinks (operator state: split positions, prepared commits);
- `stateless`: map/filter/flat_map, map_batches, union; `async_io`: map_async (`async_queue`);
- `lifecycle`: the user's rich functions (open, close) and their operator state;
- `loop_head`: the head of a loop; `time`: watermarks generated mid-stream;
- `keyed`: count and reduce per key; `process`: a user's keyed process function with timers;
- `windows`: event-time windows on shared slices; `window_triggers`: processing-time and count
  windows, and triggers (early firings, count, purging); `timers`: keyed timers in both domains;
- `side_outputs`: tagged records in band, and the splits that keep them;
- two inputs (`plan.two_inputs`): `co_process` (connected streams), `broadcast` (broadcast
  state), and the joins: `interval_join`, `window_join`, `temporal_join` (shared: `join_io`);
- `aggregates`: count, sum, min, max, mean and aggregate functions per key, local and global
  (columnar tables).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from ...plan.aggregates import KeyedAggregateSpec, LocalAggregateSpec, LocalWindowSpec
from ...plan.functions import RichFunction
from ...plan.specs import (
    AssignTimestampsSpec,
    AsyncMapSpec,
    IterationHeadSpec,
    KeyedProcessSpec,
    KeyedReduceSpec,
    KeyedWindowSpec,
    MapBatchesSpec,
    OperatorSpec,
    RecordFnSpec,
    SideOutputSpec,
    SinkSpec,
    SourceSpec,
    SplitLateSpec,
    UnionSpec,
)
from ...plan.triggers import WindowTime
from ...plan.two_inputs import (
    BroadcastProcessSpec,
    CoProcessSpec,
    IntervalJoinSpec,
    KeyedCoProcessSpec,
    TemporalJoinSpec,
    WindowJoinSpec,
)
from .aggregates.keyed import KeyedAggregateOperator
from .aggregates.local import LocalAggregateOperator
from .aggregates.local_windows import LocalWindowOperator
from .async_io import AsyncWaitOperator
from .base import OperatorContext, OperatorSnapshot, RuntimeOperator
from .broadcast import BroadcastProcessOperator, KeyedBroadcastProcessOperator
from .co_process import CoProcessOperator, KeyedCoProcessOperator
from .interval_join import IntervalJoinOperator
from .io import SourceOperator, SourcePositions
from .keyed import KeyedOperator, KeyedReduceOperator
from .loop_head import IterationHeadOperator, LoopLog
from .process import KeyedProcessOperator, ProcessContext
from .side_outputs import SideOutputOperator, Tagged
from .sink import SinkOperator
from .stateless import MapBatchesOperator, RecordFnOperator, UnionOperator
from .temporal_join import TemporalJoinOperator
from .time import AssignTimestampsOperator
from .window_join import WindowJoinOperator
from .window_output import LateRecord, SplitLateOperator
from .window_triggers import TriggeredWindowOperator
from .windows import KeyedWindowOperator

__all__ = [
    "AsyncWaitOperator",
    "KeyedWindowOperator",
    "TriggeredWindowOperator",
    "LateRecord",
    "SplitLateOperator",
    "AssignTimestampsOperator",
    "IterationHeadOperator", "KeyedAggregateOperator", "KeyedOperator", "LocalAggregateOperator", "LocalWindowOperator",
    "KeyedProcessOperator",
    "KeyedReduceOperator", "LoopLog", "MapBatchesOperator", "OperatorContext", "OperatorSnapshot",
    "ProcessContext", "RecordFnOperator", "RuntimeOperator", "SinkOperator", "SourceOperator",
    "SourcePositions", "UnionOperator", "create_operator",
    "BroadcastProcessOperator", "CoProcessOperator", "IntervalJoinOperator", "KeyedBroadcastProcessOperator",
    "KeyedCoProcessOperator", "SideOutputOperator", "Tagged", "TemporalJoinOperator", "WindowJoinOperator",
]

_FACTORIES: dict[type, Callable[[Any], RuntimeOperator]] = {
    SourceSpec: SourceOperator,
    AsyncMapSpec: AsyncWaitOperator,
    AssignTimestampsSpec: AssignTimestampsOperator,
    SinkSpec: SinkOperator,
    RecordFnSpec: RecordFnOperator,
    MapBatchesSpec: MapBatchesOperator,
    UnionSpec: UnionOperator,
    IterationHeadSpec: IterationHeadOperator,
    KeyedAggregateSpec: KeyedAggregateOperator,
    LocalAggregateSpec: LocalAggregateOperator,
    LocalWindowSpec: LocalWindowOperator,
    KeyedReduceSpec: KeyedReduceOperator,
    KeyedProcessSpec: KeyedProcessOperator,
    KeyedWindowSpec: KeyedWindowOperator,
    SplitLateSpec: SplitLateOperator,
    SideOutputSpec: SideOutputOperator,
    CoProcessSpec: CoProcessOperator,
    KeyedCoProcessSpec: KeyedCoProcessOperator,
    IntervalJoinSpec: IntervalJoinOperator,
    WindowJoinSpec: WindowJoinOperator,
    TemporalJoinSpec: TemporalJoinOperator,
}


def create_operator(spec: OperatorSpec) -> RuntimeOperator:
    """A fresh running operator for `spec`; user function objects are copied per subtask (a
    rich function keeps per-subtask fields: what its `open` set up)."""
    if isinstance(spec, (KeyedProcessSpec, CoProcessSpec, KeyedCoProcessSpec, BroadcastProcessSpec)):
        spec = replace(spec, function=copy.deepcopy(spec.function))
    elif isinstance(spec, KeyedWindowSpec) and spec.function is not None:
        spec = replace(spec, function=copy.deepcopy(spec.function))
    elif isinstance(spec, (IntervalJoinSpec, WindowJoinSpec, TemporalJoinSpec)) and spec.output.process:
        spec = replace(spec, output=replace(spec.output, function=copy.deepcopy(spec.output.function)))
    elif isinstance(spec, (RecordFnSpec, MapBatchesSpec, KeyedReduceSpec)) and isinstance(spec.fn, RichFunction):
        spec = replace(spec, fn=copy.deepcopy(spec.fn))
    elif isinstance(spec, AsyncMapSpec) and isinstance(spec.function, RichFunction):
        spec = replace(spec, function=copy.deepcopy(spec.function))
    if isinstance(spec, BroadcastProcessSpec):
        return KeyedBroadcastProcessOperator(spec) if spec.key is not None else BroadcastProcessOperator(spec)
    if isinstance(spec, KeyedWindowSpec) and (spec.time is not WindowTime.EVENT or spec.trigger is not None):
        return TriggeredWindowOperator(spec)
    return _FACTORIES[type(spec)](spec)
