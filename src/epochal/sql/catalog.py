"""The views a query reads: streams registered with `env.create_view`, with their schema and time.

A view's stream carries Arrow batches (or records a batch can be made of: dicts by column name);
the first operator of every query over it casts each batch to the view's schema, so a query's
expressions are typed before the job runs. A view with `event_time` gets its watermarks once, at
its first use (`assign_timestamps`, bounded out-of-orderness by `watermark_delay`), and every query
over it shares that operator; a stream whose watermarks follow that column already keeps them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from ..api.stream import DataStream
from ..api.time import WatermarkStrategy
from ..plan.event_time import event_time_of
from ..validation import check_name
from .errors import SqlError

__all__ = ["View", "Catalog", "as_schema"]

_SPARK_TYPES: dict[str, pa.DataType] = {
    "int": pa.int32(), "integer": pa.int32(), "bigint": pa.int64(), "long": pa.int64(), "smallint": pa.int16(),
    "double": pa.float64(), "float": pa.float32(), "string": pa.string(), "boolean": pa.bool_(),
    "date": pa.date32(), "timestamp": pa.timestamp("us"),
}


def as_schema(schema: Any) -> pa.Schema:
    """A `pyarrow.Schema`, a mapping of column -> Arrow type (or Spark type name), or a Spark DDL
    string (`"id BIGINT, name STRING, ts TIMESTAMP"`) as a `pyarrow.Schema`."""
    if isinstance(schema, pa.Schema):
        return schema
    if isinstance(schema, str):
        pairs = [part.strip().split(None, 1) for part in schema.split(",") if part.strip()]
        schema = {name: kind for name, kind in pairs}
    if isinstance(schema, Mapping):
        fields = []
        for name, kind in schema.items():
            if isinstance(kind, str):
                if kind.strip().lower() not in _SPARK_TYPES:
                    raise SqlError(f"create_view: column {name!r} has type {kind!r}; types: {', '.join(_SPARK_TYPES)}")
                kind = _SPARK_TYPES[kind.strip().lower()]
            fields.append(pa.field(str(name), kind))
        return pa.schema(fields)
    raise TypeError(f"schema must be a pyarrow.Schema, a mapping of column -> type or a DDL string, got {schema!r}")


@dataclass(slots=True)
class View:
    """A registered stream: its schema, the column holding its event time, and how late records may be."""

    name: str
    stream: DataStream
    schema: pa.Schema
    event_time: str | None
    watermark_delay: float
    _timed: DataStream | None = None

    def timed(self) -> DataStream:
        """The stream with its watermarks (assigned once, shared by every query over the view)."""
        if self.event_time is None:
            return self.stream
        found = event_time_of(self.stream._env._graph, self.stream._node_id)
        if found is not None and found.field == self.event_time:
            return self.stream  # it has watermarks on this column already: they stay
        if self._timed is None:
            strategy = WatermarkStrategy.bounded_out_of_orderness(self.watermark_delay, timestamp=self.event_time)
            self._timed = self.stream.assign_timestamps(strategy, name=f"view-{self.name}-watermarks")
        return self._timed


@dataclass(slots=True)
class Catalog:
    """The views of one environment, by lower-case name."""

    views: dict[str, View] = field(default_factory=dict)
    queries: dict[str, int] = field(default_factory=dict)  # query digest -> times planned (uid prefixes)

    def add(self, name: str, stream: DataStream, schema: Any, event_time: str | None, delay: float) -> View:
        check_name("name", name)
        if not isinstance(stream, DataStream):
            raise TypeError(f"create_view: stream must be a DataStream, got {stream!r}")
        arrow = as_schema(schema)
        if event_time is not None:
            if event_time not in arrow.names:
                raise SqlError(f"create_view {name!r}: event_time {event_time!r} is not a column ({arrow.names})")
            kind = arrow.field(event_time).type
            if not (pa.types.is_timestamp(kind) or pa.types.is_integer(kind) or pa.types.is_floating(kind)):
                raise SqlError(f"create_view {name!r}: event_time {event_time!r} is {kind}, not a time or seconds")
        if name.lower() in self.views:
            raise SqlError(f"create_view: a view {name!r} exists already")
        view = View(name, stream, arrow, event_time, float(delay))
        self.views[name.lower()] = view
        return view
