"""Where `StreamEnvironment.sql`, `create_view` and `explain` find the SQL layer.

SQL sits beside the API (it builds DataStreams with it), so the API must not import it: the
`epochal` package registers the SQL frontend when it is imported, as it does the table resolver.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from ..errors import EpochalError

if TYPE_CHECKING:
    from .stream import DataStream

__all__ = ["SqlFrontend", "register_sql_frontend", "sql_frontend"]


class SqlFrontend(Protocol):
    """What the SQL layer (`epochal.sql`) gives the environment."""

    def create_view(self, env: Any, name: str, stream: Any, schema: Any, event_time: str | None,
                    watermark_delay: float) -> None: ...

    def sql(self, env: Any, query: str, emit: str | None) -> DataStream[Any]: ...

    def explain(self, env: Any, query: str) -> str: ...


_frontend: SqlFrontend | None = None


def register_sql_frontend(frontend: SqlFrontend) -> None:
    global _frontend
    _frontend = frontend


def sql_frontend() -> SqlFrontend:
    if _frontend is None:
        raise EpochalError("env.sql: no SQL frontend is registered (import epochal registers it)")
    return _frontend


class SqlMethods:
    """`StreamEnvironment`'s SQL methods (a mixin: the environment is 'self')."""

    _sql_catalog: Any = None  # the SQL layer's views of this environment

    def create_view(self, name: str, stream: Any, *, schema: Any = None, event_time: str | None = None,
                    watermark_delay: float = 0.0) -> None:
        """Register `stream` as view `name` for `sql`: its records are Arrow batches (or dicts)
        with the columns of `schema` (a `pyarrow.Schema`, a mapping of column -> type, or Spark
        DDL such as `"id BIGINT, ts TIMESTAMP"`); `event_time` names the column whose watermarks,
        `watermark_delay` seconds behind the newest time seen, fire the views' windows (Spark's
        `withWatermark(event_time, delay)`). `stream` may be a source (a `ParquetSource`, a
        `DeltaSource`...): it is read with watermarks per split; without `schema` a Parquet or
        Delta source's own schema is the view's (also for a stream `from_table` made)."""
        sql_frontend().create_view(self, name, stream, schema, event_time, watermark_delay)

    def sql(self, query: str, *, emit: str | None = None) -> DataStream[Any]:
        """The stream of Arrow batches a Spark SQL query over the views computes (`docs/sql.md`).

        `emit`: when a GROUP BY without a window emits its running results: `"per_record"` (a row
        per key per input batch that changed it) or `"on_checkpoint"` (each changed key once per
        checkpoint). Windowed aggregates emit each window once, when the watermark passes its end.
        What cannot run on a stream raises `epochal.sql.SqlError`, naming the construct and its
        position in the query."""
        return sql_frontend().sql(self, query, emit)

    def explain(self, query: str) -> str:
        """The operators `sql(query)` adds (with or without a leading `EXPLAIN`), adding none."""
        return sql_frontend().explain(self, query)
