"""Epochal: exactly-once, stateful stream processing for Python, on Apache Spark.

Layers, each a subpackage, imports pointing one way (api → plan → runtime → state; cluster
hosts the runtime; connectors and cli at the edges):

- `api`: streams and functions a program is written with;
- `plan`: the logical graph → the job graph (chaining, partitioning);
- `runtime`: tasks, channels, barrier alignment, the checkpoint coordinator;
- `state`: key groups, keyed state, snapshot files, checkpoint storage;
- `cluster`: hosts for the runtime: in this process, or on Spark.

This module re-exports the public names; everything else is reachable from its subpackage.
"""

from .api.async_io import AsyncFunction as AsyncFunction
from .api.co_functions import BroadcastProcessFunction as BroadcastProcessFunction
from .api.co_functions import CoProcessFunction as CoProcessFunction
from .api.co_functions import KeyedBroadcastProcessFunction as KeyedBroadcastProcessFunction
from .api.co_functions import KeyedCoProcessFunction as KeyedCoProcessFunction
from .api.co_functions import MapStateDescriptor as MapStateDescriptor
from .api.co_functions import OutputTag as OutputTag
from .api.co_functions import ProcessJoinFunction as ProcessJoinFunction
from .api.connector import Sink as Sink
from .api.connector import SinkWriter as SinkWriter
from .api.connector import Source as Source
from .api.connector import SplitReader as SplitReader
from .api.context import ProcessContext as ProcessContext
from .api.context import RuntimeContext as RuntimeContext
from .api.environment import StreamEnvironment as StreamEnvironment
from .api.functions import AggregateFunction as AggregateFunction
from .api.functions import BatchAggregateFunction as BatchAggregateFunction
from .api.functions import KeyedProcessFunction as KeyedProcessFunction
from .api.handle import JobHandle as JobHandle
from .api.keyed import KeyedStream as KeyedStream
from .api.rich import FilterFunction as FilterFunction
from .api.rich import FlatMapFunction as FlatMapFunction
from .api.rich import MapFunction as MapFunction
from .api.rich import ReduceFunction as ReduceFunction
from .api.rich import RichFunction as RichFunction
from .api.sql import register_sql_frontend as _register_sql_frontend
from .api.stream import DataStream as DataStream
from .api.tables import register_table_resolver as _register_table_resolver
from .api.time import WatermarkStrategy as WatermarkStrategy
from .config import CheckpointConfig as CheckpointConfig
from .config import RecoveryConfig as RecoveryConfig
from .config import RestartStrategy as RestartStrategy
from .config import StateConfig as StateConfig
from .errors import CheckpointError as CheckpointError
from .errors import CorruptCheckpointError as CorruptCheckpointError
from .errors import EpochalError as EpochalError
from .errors import GraphError as GraphError
from .errors import JobCancelledError as JobCancelledError
from .errors import JobFailedError as JobFailedError
from .errors import OperatorError as OperatorError
from .runtime.master.control import JobState as JobState
from .runtime.master.control import JobStatus as JobStatus
from .runtime.result import JobResult as JobResult
from .state.handles import ListState as ListState
from .state.handles import MapState as MapState
from .state.handles import ValueState as ValueState
from .state.operator_state import OperatorListState as OperatorListState
from .state.ttl import StateTtlConfig as StateTtlConfig

__all__ = sorted(
    [
        "AggregateFunction",
        "StateTtlConfig",
        "AsyncFunction",
        "OperatorListState",
        "RichFunction",
        "ReduceFunction",
        "MapFunction",
        "FlatMapFunction",
        "FilterFunction",
        "RuntimeContext",
        "BroadcastProcessFunction",
        "CoProcessFunction",
        "BatchAggregateFunction",
        "CheckpointConfig",
        "CheckpointError",
        "CorruptCheckpointError",
        "DataStream",
        "EpochalError",
        "GraphError",
        "JobCancelledError",
        "JobFailedError",
        "JobHandle",
        "JobResult",
        "JobState",
        "JobStatus",
        "KeyedBroadcastProcessFunction",
        "KeyedCoProcessFunction",
        "KeyedProcessFunction",
        "KeyedStream",
        "ListState",
        "MapState",
        "MapStateDescriptor",
        "OperatorError",
        "OutputTag",
        "ProcessContext",
        "ProcessJoinFunction",
        "RecoveryConfig",
        "RestartStrategy",
        "Sink",
        "SinkWriter",
        "Source",
        "SplitReader",
        "StateConfig",
        "StreamEnvironment",
        "ValueState",
        "WatermarkStrategy",
    ]
)

for _name in __all__:
    globals()[_name].__module__ = "epochal"
del _name

__version__ = "0.1.0"


def _table_source(spark: object, table: str, columns: object) -> Source:
    """`StreamEnvironment.from_table`'s source, from the connectors (imported when first used:
    they sit above the API, which never imports them)."""
    from .connectors.table import table_source

    return table_source(spark, table, columns)  # type: ignore[arg-type]


_register_table_resolver(_table_source)


def _register_sql() -> None:
    """`env.sql`'s frontend (`epochal.sql`, which imports sqlglot): registered now, cheap to import."""
    from .sql import SqlLayer

    _register_sql_frontend(SqlLayer())


_register_sql()
