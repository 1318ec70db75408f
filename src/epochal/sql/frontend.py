"""`env.sql`, `env.create_view` and `env.explain`: parse with sqlglot in Spark's dialect, plan, name.

sqlglot is the parser: a maintained SQL parser and transpiler whose `spark` dialect reads what
Spark SQL reads (window/session_window calls, Spark's casts and interval literals), with token
positions for errors; no parser of our own. Each query's operators are named
`sql-<digest>-<role>`, the digest taken from the query's canonical text (sqlglot's rendering:
whitespace and letter case of keywords do not change it), numbered when the same query is
planned twice in one environment: names are uids, so the same program restores its state.
"""

from __future__ import annotations

import hashlib
from typing import Any

from sqlglot import exp
from sqlglot.dialects.dialect import Dialect
from sqlglot.errors import ParseError, TokenError
from sqlglot.tokens import TokenType

from ..api.stream import DataStream
from .catalog import Catalog
from .errors import SqlError
from .explain import describe
from .planner import Planner
from .sources import source_schema, view_stream

__all__ = ["SqlLayer", "parse"]

EMITS = ("per_record", "on_checkpoint")


def parse(query: str) -> exp.Expr:
    """One statement in Spark's dialect; a syntax error names its line and column."""
    if not isinstance(query, str) or not query.strip():
        raise SqlError("SQL: the query is empty")
    try:
        dialect = Dialect.get_or_raise("spark")
        tokens = dialect.tokenize(query)
        for token, following in zip(tokens, tokens[1:]):
            # `GROUP BY window(ts, ...)`: Spark's window function, not the WINDOW clause's keyword
            if token.token_type == TokenType.WINDOW and following.token_type == TokenType.L_PAREN:
                token.token_type = TokenType.VAR
        statements = [s for s in dialect.parser().parse(tokens, query) if s is not None]
    except TokenError as error:
        raise SqlError(f"SQL: syntax error: {error}".splitlines()[0]) from None
    except ParseError as error:
        first = error.errors[0] if error.errors else {}
        where = f"{first.get('line', '?')}:{first.get('col', '?')}"
        message = str(first.get("description", error)).splitlines()[0]
        raise SqlError(f"SQL: syntax error at {where}: {message}") from None
    if len(statements) != 1:
        raise SqlError(f"SQL: one statement per env.sql, got {len(statements)}")
    return statements[0]


def digest(node: exp.Expr) -> str:
    return hashlib.sha256(node.sql(dialect="spark").encode()).hexdigest()[:8]


def _strip_explain(query: str) -> str:
    text = query.lstrip()
    return text[len("explain"):] if text[:7].lower() == "explain" and text[7:8].isspace() else query


def _catalog(env: Any) -> Catalog:
    if env._sql_catalog is None:
        env._sql_catalog = Catalog()
    catalog: Catalog = env._sql_catalog
    return catalog


class SqlLayer:
    """The SQL frontend `epochal` registers with the API (`api.sql`)."""

    def create_view(self, env: Any, name: str, stream: Any, schema: Any, event_time: str | None,
                    watermark_delay: float) -> None:
        if schema is None:  # the source's own (a Parquet or Delta source, env.from_table)
            schema = source_schema(name, stream)
        stream = view_stream(env, name, stream, event_time, watermark_delay)
        if stream._env is not env:
            raise SqlError(f"create_view {name!r}: the stream belongs to another environment")
        _catalog(env).add(name, stream, schema, event_time, watermark_delay)

    def sql(self, env: Any, query: str, emit: str | None) -> DataStream:
        if emit is not None and emit not in EMITS:
            raise ValueError(f"emit must be one of {EMITS}, got {emit!r}")
        if _strip_explain(query) is not query:
            raise SqlError("SQL: EXPLAIN at 1:1: env.explain(query) returns the plan (env.sql returns a stream)")
        node = parse(query)
        return self._plan(env, query, node, emit).stream

    def _plan(self, env: Any, query: str, node: exp.Expr, emit: str | None) -> Any:
        catalog = _catalog(env)
        key = digest(node)
        seen = catalog.queries.get(key, 0)
        catalog.queries[key] = seen + 1
        prefix = f"sql-{key}" if seen == 0 else f"sql-{key}-{seen + 1}"
        planner = Planner(env, catalog, query, prefix, emit)
        relation = planner.plan(node)
        return planner.materialize(relation)

    def explain(self, env: Any, query: str) -> str:
        text = _strip_explain(query)
        node = parse(text)
        catalog = _catalog(env)
        mark = env._builder.mark()
        queries, timed = dict(catalog.queries), {n: v._timed for n, v in catalog.views.items()}
        try:
            relation = self._plan(env, text, node, "per_record")
            return describe(env._graph, mark[0], relation, text)
        finally:
            env._builder.rewind(mark)
            catalog.queries.clear()
            catalog.queries.update(queries)
            for name, stream in timed.items():
                catalog.views[name]._timed = stream
