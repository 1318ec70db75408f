"""The running operators: one class per core operator spec of `plan.specs`.

- `base`: the base class, its context and snapshot, and the guard around user code;
- `io`: sources and sinks (operator state: split positions, prepared commits);
- `stateless`: map/filter/flat_map, map_batches, union; `async_io`: map_async (`async_queue`);
- `lifecycle`: the user's rich functions (open, close) and their operator state;
- `loop_head`: the head of a loop; `time`: watermarks generated mid-stream;
- `keyed`: count and reduce per key; `process`: a user's keyed process function with timers;
- `windows`: event-time windows on shared slices; `window_triggers`: processing-time and count
  windows, and triggers (early firings, count, purging); `timers`: keyed timers in both domains.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from ...plan.functions import RichFunction
from ...plan.specs import (
    AssignTimestampsSpec,
    AsyncMapSpec,
    IterationHeadSpec,
    KeyedCountSpec,
    KeyedProcessSpec,
    KeyedReduceSpec,
    KeyedWindowSpec,
    MapBatchesSpec,
    OperatorSpec,
    RecordFnSpec,
    SinkSpec,
    SourceSpec,
    SplitLateSpec,
    UnionSpec,
)
from ...plan.triggers import WindowTime
from .async_io import AsyncWaitOperator
from .base import OperatorContext, OperatorSnapshot, RuntimeOperator
from .io import SinkOperator, SourceOperator, SourcePositions
from .keyed import KeyedCountOperator, KeyedOperator, KeyedReduceOperator
from .loop_head import IterationHeadOperator, LoopLog
from .process import KeyedProcessOperator, ProcessContext
from .stateless import MapBatchesOperator, RecordFnOperator, UnionOperator
from .time import AssignTimestampsOperator
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
    "IterationHeadOperator", "KeyedCountOperator", "KeyedOperator", "KeyedProcessOperator",
    "KeyedReduceOperator", "LoopLog", "MapBatchesOperator", "OperatorContext", "OperatorSnapshot",
    "ProcessContext", "RecordFnOperator", "RuntimeOperator", "SinkOperator", "SourceOperator",
    "SourcePositions", "UnionOperator", "create_operator",
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
    KeyedCountSpec: KeyedCountOperator,
    KeyedReduceSpec: KeyedReduceOperator,
    KeyedProcessSpec: KeyedProcessOperator,
    KeyedWindowSpec: KeyedWindowOperator,
    SplitLateSpec: SplitLateOperator,
}


def create_operator(spec: OperatorSpec) -> RuntimeOperator:
    """A fresh running operator for `spec`; user function objects are copied per subtask (a
    rich function keeps per-subtask fields: what its `open` set up)."""
    if isinstance(spec, KeyedProcessSpec):
        spec = replace(spec, function=copy.deepcopy(spec.function))
    elif isinstance(spec, KeyedWindowSpec) and spec.function is not None:
        spec = replace(spec, function=copy.deepcopy(spec.function))
    elif isinstance(spec, (RecordFnSpec, MapBatchesSpec, KeyedReduceSpec)) and isinstance(spec.fn, RichFunction):
        spec = replace(spec, fn=copy.deepcopy(spec.fn))
    elif isinstance(spec, AsyncMapSpec) and isinstance(spec.function, RichFunction):
        spec = replace(spec, function=copy.deepcopy(spec.function))
    if isinstance(spec, KeyedWindowSpec) and (spec.time is not WindowTime.EVENT or spec.trigger is not None):
        return TriggeredWindowOperator(spec)
    return _FACTORIES[type(spec)](spec)
