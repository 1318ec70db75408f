"""The running operators: one class per core operator spec of `plan.specs`.

- `base`: the base class, its context and snapshot, and the guard around user code;
- `io`: sources and sinks (operator state: split positions, prepared commits);
- `stateless`: map/filter/flat_map, map_batches, union;
- `loop_head`: the head of a loop; `time`: watermarks generated mid-stream;
- `keyed`: count and reduce per key; `process`: a user's keyed process function with timers;
- `windows`: event-time windows on shared slices; `timers`: keyed timers in both time domains.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from ...plan.specs import (
    AssignTimestampsSpec,
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
from .base import OperatorContext, OperatorSnapshot, RuntimeOperator
from .io import SourceOperator, SourcePositions
from .keyed import KeyedCountOperator, KeyedOperator, KeyedReduceOperator
from .loop_head import IterationHeadOperator, LoopLog
from .process import KeyedProcessOperator, ProcessContext
from .sink import SinkOperator
from .stateless import MapBatchesOperator, RecordFnOperator, UnionOperator
from .time import AssignTimestampsOperator
from .window_output import LateRecord, SplitLateOperator
from .windows import KeyedWindowOperator

__all__ = [
    "KeyedWindowOperator",
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
    """A fresh running operator for `spec`; user function objects are copied per subtask."""
    if isinstance(spec, KeyedProcessSpec):
        spec = replace(spec, function=copy.deepcopy(spec.function))
    elif isinstance(spec, KeyedWindowSpec) and spec.function is not None:
        spec = replace(spec, function=copy.deepcopy(spec.function))
    return _FACTORIES[type(spec)](spec)
