"""JOIN on streams: interval joins of two streams, and stream-table (temporal) joins.

- Two views with event time, equal keys and a time bound on both sides
  (`b.ts BETWEEN a.ts AND a.ts + INTERVAL 10 SECONDS`, or `>=`/`<=` pairs; Spark's stream-stream
  join condition) become `key_by(...).interval_join(...).between(lower, upper)` (`api.joins`):
  inner, LEFT OUTER (a left row no right row met comes out with NULLs once the watermark passes
  its bound) or LEFT SEMI. Each side is kept until the watermark passes the last time the other
  could match it, so state stays bounded.
- Without a time bound, the right side is a table: each left row joins the version of its key
  valid at its event time (the right view's `event_time`; the temporal join), or, for a right
  view without event time, the newest version when the row arrives (a lookup join, Spark's
  stream-static join). Inner or LEFT OUTER.

The result keeps the left's columns, then the right's (a right column whose name the left has is
`right_<name>` unqualified; `b.name` names it either way). Conditions in ON other than the keys
and the time bound filter the pairs of an inner join; an outer join refuses them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from sqlglot import exp

from ..api.joins import How
from ..plan.two_inputs import JoinType, join_schema
from .errors import parse_duration, refuse
from .expressions import Expr, Scope, compile_expression
from .grouping import Keys

if TYPE_CHECKING:
    from .planner import Planner, Relation

KEY = "__jk"
_FLIP: dict[type, type] = {exp.GTE: exp.LTE, exp.GT: exp.LT, exp.LTE: exp.GTE, exp.LT: exp.GT}


@dataclass(slots=True)
class Bounds:
    """right time - left time within [lower, upper]."""

    lower: float | None = None
    upper: float | None = None
    lower_inclusive: bool = True
    upper_inclusive: bool = True

    def add(self, op: type, value: float) -> None:
        if op in (exp.GTE, exp.GT):
            if self.lower is None or value >= self.lower:
                self.lower, self.lower_inclusive = value, op is exp.GTE
        elif self.upper is None or value <= self.upper:
            self.upper, self.upper_inclusive = value, op is exp.LTE


def _conjuncts(node: exp.Expr) -> list[exp.Expr]:
    if isinstance(node, exp.And):
        return _conjuncts(node.args["this"]) + _conjuncts(node.args["expression"])
    if isinstance(node, exp.Paren):
        return _conjuncts(node.this)
    return [node]


def _side(column: exp.Column, left: Relation, right: Relation) -> str | None:
    """"L" or "R": the relation a column belongs to (by qualifier, else by name), None if neither."""
    qualifier = str(column.table).lower() if column.table else None
    name = column.name.lower()
    found = []
    for side, relation in (("L", left), ("R", right)):
        qualifiers = {q.lower() for q in relation.qualifiers}
        if (qualifier is None or qualifier in qualifiers) and name in {n.lower() for n in relation.schema.names}:
            found.append(side)
    return found[0] if len(found) == 1 else None


def _time_term(node: exp.Expr, left: Relation, right: Relation, query: str) -> tuple[str, float] | None:
    """`(side, offset)` of `<event-time column> [+|- INTERVAL ...]`, else None."""
    offset = 0.0
    if isinstance(node, (exp.Add, exp.Sub)) and isinstance(node.args["expression"], exp.Interval):
        interval = node.args["expression"]
        unit = interval.args.get("unit")
        seconds = parse_duration(f"{interval.this.name} {unit.name if unit is not None else ''}")
        if seconds is None:
            raise refuse(interval, query, "a join's time bound is a duration like INTERVAL 10 SECONDS")
        offset = seconds if isinstance(node, exp.Add) else -seconds
        node = node.args["this"]
    if not isinstance(node, exp.Column):
        return None
    side = _side(node, left, right)
    time = (left if side == "L" else right).event_time if side else None
    return (side, offset) if side and time is not None and node.name.lower() == time.lower() else None


def _bound(node: exp.Expr, bounds: Bounds, left: Relation, right: Relation, query: str) -> bool:
    """Adds `node` to `bounds` if it bounds right time - left time; whether it did."""
    if isinstance(node, exp.Between):
        low, high = exp.GTE(this=node.this, expression=node.args["low"]), \
            exp.LTE(this=node.this, expression=node.args["high"])
        if _bound(low, bounds, left, right, query):
            return _bound(high, bounds, left, right, query) or True
        return False
    if isinstance(node, exp.EQ):  # equal event times (two windows' ends): a bound of [offset, offset]
        a = _time_term(node.args["this"], left, right, query)
        b = _time_term(node.args["expression"], left, right, query)
        if a is None or b is None or a[0] == b[0]:
            return False
        offset = (b[1] - a[1]) if a[0] == "R" else (a[1] - b[1])
        bounds.add(exp.GTE, offset)
        bounds.add(exp.LTE, offset)
        return True
    if type(node) not in _FLIP:
        return False
    a = _time_term(node.args["this"], left, right, query)
    b = _time_term(node.args["expression"], left, right, query)
    if a is None or b is None or a[0] == b[0]:
        return False
    op: type = type(node)
    if a[0] == "R":  # R + oa op L + ob  ->  R - L op ob - oa
        bounds.add(op, b[1] - a[1])
    else:  # L + oa op R + ob  ->  R - L flip(op) oa - ob
        bounds.add(_FLIP[op], a[1] - b[1])
    return True


def _split(on: exp.Expr, left: Relation, right: Relation, query: str,
           times_are_bounds: bool) -> tuple[list[tuple[exp.Expr, exp.Expr]], Bounds, list[exp.Expr]]:
    """ON as (equal keys, left and right; the time bound; the other conditions). Equal event times
    of both sides (two windows' ends) are a bound of [0, 0] if `times_are_bounds`, else a key."""
    keys: list[tuple[exp.Expr, exp.Expr]] = []
    bounds = Bounds()
    residual: list[exp.Expr] = []
    for conjunct in _conjuncts(on):
        if times_are_bounds and isinstance(conjunct, exp.EQ) and _bound(conjunct, bounds, left, right, query):
            continue
        if isinstance(conjunct, exp.EQ) and all(isinstance(c, exp.Column) for c in conjunct.args.values()):
            a, b = conjunct.args["this"], conjunct.args["expression"]
            sides = (_side(a, left, right), _side(b, left, right))
            if sides == ("L", "R"):
                keys.append((a, b))
                continue
            if sides == ("R", "L"):
                keys.append((b, a))
                continue
        if not isinstance(conjunct, exp.EQ) and _bound(conjunct, bounds, left, right, query):
            continue
        residual.append(conjunct)
    return keys, bounds, residual


def _joined_scope(left: Relation, right: Relation, schema: pa.Schema, width: int, query: str) -> Scope:
    columns: dict[tuple[str | None, str], str] = {}
    names = schema.names
    for i, name in enumerate(left.schema.names):
        columns[(None, name.lower())] = names[i]
        for q in left.qualifiers:
            columns[(q.lower(), name.lower())] = names[i]
    for j, name in enumerate(right.schema.names):
        out = names[width + j] if width + j < len(names) else None
        if out is None:
            continue
        columns.setdefault((None, name.lower()), out)
        columns[(None, out.lower())] = out
        for q in right.qualifiers:
            columns[(q.lower(), name.lower())] = out
    return Scope(columns, query)


def plan_joins(planner: Planner, select: exp.Select, left: Relation) -> Relation:
    for join in select.args["joins"]:
        left = _join(planner, join, left)
    return left


def _join(planner: Planner, join: exp.Join, left: Relation) -> Relation:
    from .planner import Relation

    query = planner.query
    side, kind = (join.args.get("side") or "").upper(), (join.args.get("kind") or "").upper()
    if side in ("RIGHT", "FULL"):
        raise refuse(join, query, f"{side} OUTER JOIN is not supported: swap the sides for a LEFT OUTER JOIN")
    if kind == "CROSS" or join.args.get("on") is None:
        raise refuse(join, query, "a join on streams needs ON with equal keys (no CROSS JOIN, no USING)")
    how: How = "semi" if kind == "SEMI" else ("left" if side == "LEFT" else "inner")
    if kind in ("ANTI",):
        raise refuse(join, query, "LEFT ANTI JOIN is not supported on streams")
    right = planner.table(join.this)
    left, right = planner.materialize(left), planner.materialize(right)
    if left.updates or right.updates:
        raise refuse(join, query, "a join of a GROUP BY without a window: its rows are updates of a key's result "
                                  "(Spark SS refuses it too); GROUP BY a window or the event-time column")
    keys, bounds, residual = _split(join.args["on"], left, right, query, times_are_bounds=True)
    if not keys:  # equal event times and nothing else to key by: they are the key (as before)
        keys, bounds, residual = _split(join.args["on"], left, right, query, times_are_bounds=False)
    if not keys:
        raise refuse(join.args["on"], query, "a join on streams needs equal keys of both sides in ON (a = b)")
    if residual and how != "inner":
        raise refuse(residual[0], query, f"only keys and a time bound in the ON of a {how} join")
    left_keyed = _with_key(planner, left, [k for k, _ in keys], "left")
    right_keyed = _with_key(planner, right, [k for _, k in keys], "right")
    schemas = (left_keyed.schema, right_keyed.schema)
    name = planner.name(f"join-{how}")
    timed = bounds.lower is not None or bounds.upper is not None
    if timed:
        if bounds.lower is None or bounds.upper is None or left.event_time is None or right.event_time is None:
            raise refuse(join.args["on"], query, "a stream-stream join needs both sides' event time bounded both "
                                                 "ways (b.ts BETWEEN a.ts - INTERVAL ... AND a.ts + INTERVAL ...)")
        joined = (left_keyed.stream.key_by(KEY).interval_join(right_keyed.stream.key_by(KEY))
                  .between(bounds.lower, bounds.upper, lower_inclusive=bounds.lower_inclusive,
                           upper_inclusive=bounds.upper_inclusive)
                  .apply(how=how, schemas=schemas, name=name))
    else:
        if how == "semi":
            raise refuse(join, query, "LEFT SEMI JOIN needs a time bound (an interval join)")
        as_of = "event_time" if right.event_time is not None and left.event_time is not None else "arrival"
        joined = (left_keyed.stream.key_by(KEY).temporal_join(right_keyed.stream.key_by(KEY), as_of=as_of)
                  .apply(how=how, schemas=schemas, name=name))
    schema, width = join_schema(left_keyed.schema, right_keyed.schema, JoinType(how))
    # An interval join holds its output watermark back by its bounds (`IntervalJoinOperator.
    # output_watermark`), so its output keeps the left's event time, which a window may then use,
    # when both sides' watermarks follow a column of the same name (the join's output has one
    # event time). A temporal join emits a row once the watermark passed it: no event time.
    event_time = left.event_time if timed and left.event_time == right.event_time else None
    scope = _joined_scope(left_keyed, right_keyed, schema, width, query)
    result = Relation(joined, schema, event_time, (), columns=scope.columns)
    if residual:
        condition: exp.Expr = residual[0]
        for more in residual[1:]:
            condition = exp.And(this=condition, expression=more)
        names = list(schema.names)
        outputs: list[Expr] = [compile_expression(exp.column(n, quoted=True), result.scope(query)) for n in names]
        where = compile_expression(condition, result.scope(query))
        planner.type_of(condition, where, result)
        stream = planner.project(result, names, outputs, where, role="join-filter")
        result = Relation(stream, schema, event_time, (), columns=scope.columns)
    return result


def _with_key(planner: Planner, relation: Relation, keys: list[exp.Expr], role: str) -> Relation:
    """The relation with its join key as column `__jk` (several keys encoded as one)."""
    from .planner import Relation

    scope = relation.scope(planner.query)
    compiled = tuple(compile_expression(k, scope) for k in keys)
    names = [*relation.schema.names, KEY]
    outputs: list[Any] = [compile_expression(exp.column(n, quoted=True), scope) for n in relation.schema.names]
    outputs.append(Keys(compiled))
    stream = planner.project(relation, names, outputs, None, role=f"join-{role}-key")
    key_type = planner.type_of(keys[0], Keys(compiled), relation) if len(keys) == 1 else pa.string()
    schema = pa.schema([*relation.schema, pa.field(KEY, key_type)])
    return Relation(stream, schema, relation.event_time, relation.qualifiers)
