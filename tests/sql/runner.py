"""Run a SQL query over rows with Epochal (in process) and, for the differential tests, with Spark SQL."""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from epochal import StreamEnvironment
from epochal.testing import CollectSink, ListSource

from .grammar import DDL, SCHEMA


def batches_of(committed: list[Any], schema: pa.Schema | None = None) -> list[dict[str, Any]]:
    """The rows a CollectSink committed (Arrow batches, or rows as tuples) as dicts."""
    out: list[dict[str, Any]] = []
    for item in committed:
        if isinstance(item, pa.RecordBatch):
            out.extend(item.to_pylist())
        else:
            assert schema is not None
            out.append(dict(zip(schema.names, item)))
    return out


def epochal_rows(query: str, rows: list[dict[str, Any]], *, parallelism: int = 2, batch_size: int = 7,
                 emit: str | None = None, delay: float = 0.0,
                 other: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    env = StreamEnvironment(parallelism=parallelism, executor="inprocess")
    env.create_view("t", env.from_source(ListSource(rows, batch_size=batch_size)), schema=DDL, event_time="ts",
                    watermark_delay=delay)
    env.create_view("u", env.from_source(ListSource(other or rows[:1], batch_size=3)), schema=DDL, event_time="ts",
                    watermark_delay=delay)
    sink = CollectSink()
    stream = env.sql(query, emit=emit)
    stream.map_batches(_keep, name="keep").sink_to(sink)
    env.execute("sql-test")
    return [r for batch in sink.committed() for r in _rows(batch)]


def _keep(batch: pa.RecordBatch) -> pa.RecordBatch:
    """One struct column: the sink's records are then the rows as dicts, names and all."""
    rows = pa.StructArray.from_arrays(batch.columns, names=batch.schema.names) if batch.num_columns else \
        pa.array([{}] * batch.num_rows)
    return pa.RecordBatch.from_arrays([rows], names=["row"])


def _rows(item: Any) -> list[dict[str, Any]]:
    if isinstance(item, pa.RecordBatch):
        return list(item.to_pylist())
    if isinstance(item, dict):
        return [item]
    raise AssertionError(f"a SQL stream emitted {item!r}, not an Arrow batch")


def spark_rows(spark: Any, query: str, rows: list[dict[str, Any]],
               other: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    from pyspark.sql import types as T

    schema = T.StructType([
        T.StructField("k", T.StringType()), T.StructField("g", T.IntegerType()), T.StructField("x", T.LongType()),
        T.StructField("y", T.IntegerType()), T.StructField("d", T.DoubleType()),
        T.StructField("ts", T.TimestampNTZType()),
    ])
    for view, data in (("t", rows), ("u", other or rows[:1])):
        frame = spark.createDataFrame([tuple(r[n] for n in SCHEMA.names) for r in data], schema)
        frame.createOrReplaceTempView(view)
    return [r.asDict() for r in spark.sql(query).collect()]
