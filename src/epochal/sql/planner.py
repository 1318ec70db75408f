"""From a parsed query to operators: FROM, WHERE, the SELECT list, WITH and UNION ALL.

A relation is a stream of Arrow batches with a known schema (`Relation`). Reading a view adds
nothing but the view's watermarks (once per view); a SELECT without GROUP BY is one
`map_batches` (the view's cast, WHERE and the SELECT list fused: `batches.Project`); a grouped
SELECT is `grouping`'s; a join is `joins`'. Every operator is named `<prefix>-<role>`, the prefix
derived from the query's text (`frontend`), so its uid, and with it its checkpointed state, is the
same each time the same query is planned: a restart restores it.

Types are known before the job runs: each projection is run once on an empty batch of its
input's schema, which types its output (and shows a type error at `env.sql`, not on a worker).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from sqlglot import exp

from .batches import Positional, Project
from .catalog import Catalog
from .errors import SqlError, refuse
from .expressions import Expr, Scope, check, compile_expression

if TYPE_CHECKING:
    from ..api.environment import StreamEnvironment
    from ..api.stream import DataStream

_REFUSED = {
    "order": "ORDER BY is not supported on streams (Spark sorts only aggregated results in complete mode)",
    "limit": "LIMIT is not supported on streams",
    "offset": "OFFSET is not supported on streams",
    "qualify": "QUALIFY is not supported on streams",
    "sort": "SORT BY is not supported on streams",
    "cluster": "CLUSTER BY is not supported on streams",
    "distribute": "DISTRIBUTE BY is not supported on streams",
    "laterals": "LATERAL VIEW is not supported on streams",
    "pivots": "PIVOT is not supported on streams",
}


@dataclass(slots=True)
class Relation:
    """A stream of Arrow batches with `schema`; `event_time` names the column the stream's
    watermarks follow (None once it is gone); `conform`: batches still to be cast to it (a view)."""

    stream: DataStream
    schema: pa.Schema
    event_time: str | None
    qualifiers: tuple[str, ...]
    conform: pa.Schema | None = None
    columns: dict[tuple[str | None, str], str] | None = None  # a join's: qualified names of both sides
    updates: bool = False  # a running aggregate's rows: each a key's new result, replacing its last one

    def scope(self, query: str) -> Scope:
        if self.columns is not None:
            return Scope(dict(self.columns), query)
        return Scope.of(list(self.schema.names), query, self.qualifiers)


@dataclass(slots=True)
class Planner:
    """Plans one query into `env`'s graph; `prefix` names its operators."""

    env: StreamEnvironment
    catalog: Catalog
    query: str
    prefix: str
    emit: str | None = None
    ctes: dict[str, exp.Expr] = field(default_factory=dict)
    planned: dict[str, Relation] = field(default_factory=dict)
    _roles: dict[str, int] = field(default_factory=dict)

    # -- names and types ---------------------------------------------------------------------
    def name(self, role: str) -> str:
        """`<prefix>-<role>`, numbered when the role repeats: the operator's name and uid."""
        count = self._roles.get(role, 0)
        self._roles[role] = count + 1
        return f"{self.prefix}-{role}" if count == 0 else f"{self.prefix}-{role}{count + 1}"

    def stable(self, stream: DataStream) -> None:
        """Nothing to do: an operator's uid is its name unless set, and names here are derived."""

    def type_of(self, node: exp.Expr, expr: Expr, source: Relation) -> pa.DataType:
        return check(node, expr, pa.RecordBatch.from_pylist([], schema=source.schema), self.query)

    def output_schema(self, fn: Callable[[pa.RecordBatch], pa.RecordBatch], positional: tuple[str, ...],
                      types: list[pa.DataType], names: list[str]) -> pa.Schema:
        empty = pa.RecordBatch.from_arrays([pa.array([], t) for t in types], names=list(positional))
        try:
            return fn(empty).schema
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as error:
            raise SqlError(f"SQL: the SELECT list cannot be computed: {error}".splitlines()[0]) from None

    # -- operators ---------------------------------------------------------------------------
    def project(self, source: Relation, names: list[str], outputs: list[Expr], where: Expr | None,
                role: str = "select") -> DataStream:
        """One `map_batches`: the view's cast (if any), WHERE, then `outputs` named `names`."""
        function = Project(source.conform, where, tuple(names), tuple(outputs))
        return source.stream.map_batches(function, name=self.name(role))

    def where(self, select: exp.Select, source: Relation) -> Expr | None:
        node = select.args.get("where")
        if node is None:
            return None
        compiled = compile_expression(node.this, source.scope(self.query))
        kind = self.type_of(node.this, compiled, source)
        if not (pa.types.is_boolean(kind) or pa.types.is_null(kind)):
            raise refuse(node.this, self.query, f"WHERE needs a condition, this is {kind}")
        return compiled

    # -- queries -----------------------------------------------------------------------------
    def plan(self, node: exp.Expr) -> Relation:
        with_ = node.args.get("with_") or node.args.get("with")
        if with_ is not None:
            if with_.args.get("recursive"):
                raise refuse(with_, self.query, "WITH RECURSIVE is not supported on streams")
            for cte in with_.expressions:
                self.ctes[cte.alias_or_name.lower()] = cte.this
        if isinstance(node, exp.Subquery):
            return self.plan(node.this)
        if isinstance(node, exp.Union):
            return self._union(node)
        if isinstance(node, (exp.Intersect, exp.Except)):
            raise refuse(node, self.query, f"{type(node).__name__.upper()} is not supported on streams")
        if isinstance(node, exp.Select):
            return self._select(node)
        raise refuse(node, self.query, f"{type(node).__name__} statements are not supported: a SELECT is")

    def _union(self, node: exp.Union) -> Relation:
        if node.args.get("distinct"):
            raise refuse(node, self.query, "UNION (DISTINCT) keeps every row ever seen: UNION ALL is supported")
        left, right = self.plan(node.this), self.plan(node.expression)
        left, right = self.materialize(left), self.materialize(right)
        if len(left.schema) != len(right.schema):
            raise refuse(node, self.query, f"UNION ALL of {len(left.schema)} and {len(right.schema)} columns")
        if right.schema != left.schema:
            cast = Recast(left.schema)
            try:
                cast(pa.RecordBatch.from_pylist([], schema=right.schema))
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as error:
                raise refuse(node, self.query, f"UNION ALL of {right.schema.types} into {left.schema.types}: "
                             f"{error}".splitlines()[0]) from None
            right = Relation(right.stream.map_batches(cast, name=self.name("union-cast")), left.schema,
                             right.event_time, (), updates=right.updates)
        union = left.stream.union(right.stream, name=self.name("union"))
        same_time = left.event_time is not None and left.event_time == right.event_time
        return Relation(union, left.schema, left.event_time if same_time else None, (),
                        updates=left.updates or right.updates)

    def materialize(self, relation: Relation) -> Relation:
        """A relation whose batches already have its schema (a view read as it is gets its cast)."""
        if relation.conform is None:
            return relation
        names = list(relation.schema.names)
        scope = relation.scope(self.query)
        outputs = [compile_expression(exp.column(n, quoted=True), scope) for n in names]
        stream = self.project(relation, names, outputs, None, role="view")
        return Relation(stream, relation.schema, relation.event_time, relation.qualifiers, updates=relation.updates)

    def table(self, node: exp.Expr) -> Relation:
        """A FROM item: a view, a WITH query, or a subquery."""
        if isinstance(node, exp.Subquery):
            inner = self.plan(node.this)
            alias = node.alias_or_name
            return Relation(inner.stream, inner.schema, inner.event_time, (alias,) if alias else (), inner.conform,
                            updates=inner.updates)
        if not isinstance(node, exp.Table) or node.args.get("db"):
            raise refuse(node, self.query, "FROM takes a view, a WITH query or a subquery")
        name = node.name.lower()
        qualifiers = tuple({node.name, node.alias_or_name})
        if name in self.ctes:
            if name not in self.planned:
                self.planned[name] = self.materialize(self.plan(self.ctes[name]))
            found = self.planned[name]
            return Relation(found.stream, found.schema, found.event_time, qualifiers, updates=found.updates)
        view = self.catalog.views.get(name)
        if view is None:
            known = ", ".join(sorted(self.catalog.views)) or "none"
            raise refuse(node, self.query, f"no view {node.name!r} (views: {known}; env.create_view registers one)")
        return Relation(view.timed(), view.schema, view.event_time, qualifiers, conform=view.schema)

    def _select(self, select: exp.Select) -> Relation:
        from .grouping import is_grouped, plan_grouped
        from .joins import plan_joins

        for key, why in _REFUSED.items():
            value = select.args.get(key)
            if value:
                raise refuse(value[0] if isinstance(value, list) else value, self.query, why)
        if select.args.get("distinct"):
            raise refuse(select, self.query, "SELECT DISTINCT keeps every row ever seen: GROUP BY a window instead")
        for node in select.walk():
            if isinstance(node, exp.Window):
                raise refuse(node, self.query, "OVER (...) window functions are not supported on streams "
                                               "(Spark refuses them too): GROUP BY window(...) instead")
            if isinstance(node, exp.Subquery) and node is not select and node.parent is not None \
                    and not isinstance(node.parent, (exp.From, exp.Join)):
                raise refuse(node, self.query, "subqueries in expressions are not supported on streams")
        from_ = select.args.get("from_") or select.args.get("from")
        if from_ is None:
            raise refuse(select, self.query, "a streaming SELECT needs FROM a view")
        source = self.table(from_.this)
        if select.args.get("joins"):
            source = plan_joins(self, select, source)
        if is_grouped(select):
            return plan_grouped(self, select, source)
        return self._project(select, source)

    def _project(self, select: exp.Select, source: Relation) -> Relation:
        from .finals import output_name

        scope = source.scope(self.query)
        names: list[str] = []
        outputs: list[Expr] = []
        event_time = None
        for node in select.expressions:
            if isinstance(node, exp.Star) or (isinstance(node, exp.Column) and isinstance(node.this, exp.Star)):
                qualifier = str(node.table).lower() if isinstance(node, exp.Column) and node.table else None
                if qualifier is not None and qualifier not in {q.lower() for q in source.qualifiers}:
                    raise refuse(node, self.query, f"no table {qualifier} here")
                for name in source.schema.names:
                    if name in ("__jk", "right___jk"):  # a join's keys
                        continue
                    names.append(name)
                    outputs.append(compile_expression(exp.column(name, quoted=True), scope))
                    if name == source.event_time:
                        event_time = name
                continue
            name = output_name(node)
            inner = node.this if isinstance(node, exp.Alias) else node
            compiled = compile_expression(inner, scope)
            self.type_of(inner, compiled, source)
            if isinstance(inner, exp.Column) and source.event_time is not None and name == source.event_time \
                    and scope.column(inner) == source.event_time:
                event_time = name
            names.append(name)
            outputs.append(compiled)
        if len(set(names)) != len(names):
            duplicate = next(n for n in names if names.count(n) > 1)
            raise refuse(select, self.query, f"two columns named {duplicate!r}: give one an alias")
        where = self.where(select, source)
        function = Project(source.conform, where, tuple(names), tuple(outputs))
        empty = pa.RecordBatch.from_pylist([], schema=source.schema)
        try:
            schema = function(empty).schema
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as error:
            raise SqlError(f"SQL: the SELECT list at {_position(select, self.query)} cannot be computed: "
                           f"{error}".splitlines()[0]) from None
        stream = source.stream.map_batches(function, name=self.name("select"))
        return Relation(stream, schema, event_time, (), updates=source.updates)


def _position(node: exp.Expr, query: str) -> str:
    from .errors import position_of

    return position_of(node, query)


@dataclass(frozen=True, slots=True)
class Recast:
    """A batch renamed and cast to `schema` by position (the right side of UNION ALL)."""

    schema: pa.Schema

    def __call__(self, batch: Any) -> pa.RecordBatch:
        renamed = Positional(tuple(self.schema.names))(batch)
        arrays = [c.cast(f.type) for c, f in zip(renamed.columns, self.schema)]
        return pa.RecordBatch.from_arrays(arrays, schema=self.schema)
