"""Streaming SQL in Spark's dialect, compiled to Epochal's columnar operators (docs/sql.md).

`env.create_view(name, stream, schema=..., event_time=..., watermark_delay=...)` registers a
stream; `env.sql(query)` returns the stream of Arrow batches the query computes; `env.explain`
prints the operators. Parsing: sqlglot (`frontend`); planning: `planner` (FROM, WHERE, SELECT,
WITH, UNION ALL), `grouping` and `finals` (GROUP BY, windows, aggregates), `joins`; expressions:
`expressions` (pyarrow.compute over whole batches).
"""

from .errors import SqlError as SqlError
from .frontend import SqlLayer as SqlLayer

__all__ = ["SqlError", "SqlLayer"]
