"""Views straight over sources: `env.create_view(name, source)` with a `ParquetSource`, a
`DeltaSource` (or any source), or a stream `env.from_table(...)` / `env.from_source(...)` made.

A source given as it is becomes `env.from_source(source, watermarks=...)`: with `event_time`,
every split generates its own watermark on that column, `watermark_delay` behind the newest time
it read (a watermark per split is exact where one per stream, mid-stream, is held back by the
most behind). Without `schema`, the source's own is the view's: a Delta table's (`schema`), or
the footer of a Parquet source's first file, less the columns the source does not read.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from ..api.stream import DataStream
from ..api.time import WatermarkStrategy
from ..plan.specs import SourceSpec
from .errors import SqlError

__all__ = ["view_stream", "source_of", "source_schema"]


def _is_source(value: Any) -> bool:
    return callable(getattr(value, "splits", None)) and callable(getattr(value, "open_split", None))


def view_stream(env: Any, name: str, stream: Any, event_time: str | None, delay: float) -> DataStream:
    """`stream` as it is, or a source read with watermarks on `event_time`."""
    if isinstance(stream, DataStream):
        return stream
    if not _is_source(stream):
        raise TypeError(f"create_view: stream must be a DataStream or a source, got {stream!r}")
    watermarks = None if event_time is None else \
        WatermarkStrategy.bounded_out_of_orderness(delay, timestamp=event_time)
    result: DataStream = env.from_source(stream, name=f"view-{name}", watermarks=watermarks)
    return result


def source_of(stream: Any) -> Any | None:
    """The source a view reads: `stream` itself, or the source of the stream's first operator."""
    if _is_source(stream):
        return stream
    if isinstance(stream, DataStream):
        spec = stream._env._graph.nodes[stream._node_id].spec
        if isinstance(spec, SourceSpec):
            return spec.source
    return None


def source_schema(name: str, stream: Any) -> pa.Schema:
    """The schema of the source a view reads, when the view gives none."""
    source = source_of(stream)
    schema = getattr(source, "schema", None) if source is not None else None
    if schema is None and source is not None and callable(getattr(source, "files", None)) \
            and type(source).__name__ == "ParquetSource":
        schema = _parquet_schema(source)
    if not isinstance(schema, pa.Schema):
        raise SqlError(f"create_view {name!r}: give schema=... (the stream's own is known only for a Parquet "
                       "or Delta source, or env.from_table)")
    columns = getattr(source, "columns", None)
    if columns:
        schema = pa.schema([schema.field(c) for c in columns])
    return pa.schema([pa.field(f.name, _plain(f.type)) for f in schema])


def _parquet_schema(source: Any) -> pa.Schema | None:
    import pyarrow.parquet as pq

    files = source.files()
    if not files:
        return None
    fs, _ = source.target()
    with fs.open_input_file(files[0].path) as f:
        schema: pa.Schema = pq.read_schema(f)
    return schema


def _plain(kind: pa.DataType) -> pa.DataType:
    """A dictionary column as its values' type (the view casts to it; Spark has no dictionaries)."""
    return kind.value_type if pa.types.is_dictionary(kind) else kind
