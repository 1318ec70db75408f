"""The last step of a grouped query: from the aggregates' rows to the SELECT's columns.

The rows that come out of the aggregates (`__key`, the window's bounds in seconds, one column per
part) are named by position, then the derived columns are computed (the grouping keys decoded,
the window's bounds in the event time's type, each aggregate from its parts: avg = sum / count),
then HAVING and the SELECT list run over them, as expressions in which each grouping key and each
aggregate is a column (`Scope.rewrites`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc
from sqlglot import exp

from .batches import Positional, Project
from .errors import refuse
from .expressions import Expr, Scope, compile_expression, key_of
from .timing import TICK, output_time, retimed, window_time

if TYPE_CHECKING:
    from ..api.stream import DataStream
    from .grouping import Grouping
    from .planner import Planner
    from .relation import Relation

_UNITS = {"s": 1, "ms": 1_000, "us": 1_000_000, "ns": 1_000_000_000}


@dataclass(frozen=True, slots=True)
class Derive:
    """The derived columns of a grouped row (see the module's docstring)."""

    key_types: tuple[pa.DataType, ...]
    windowed: bool
    time_type: pa.DataType | None
    aggregates: tuple[tuple[str, tuple[str, ...], pa.DataType], ...]  # (how, part columns, result type)

    def __call__(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        from .merge import decode_keys

        names, arrays = list(batch.schema.names), list(batch.columns)
        keys = batch.column("__key")
        if len(self.key_types) == 1:
            decoded = [keys.cast(self.key_types[0])]
        elif self.key_types:
            decoded = decode_keys(keys, self.key_types)
        else:
            decoded = []
        for j, column in enumerate(decoded):
            names.append(f"__g{j}")
            arrays.append(column)
        if self.windowed:
            start, end = (self._time(batch.column(c)) for c in ("__wstart", "__wend"))
            names += ["__window_start", "__window_end", "__window", "__window_time"]
            arrays += [start, end, pa.StructArray.from_arrays([start, end], names=["start", "end"]), window_time(end)]
        for i, (how, parts, kind) in enumerate(self.aggregates):
            values = [batch.column(p) for p in parts]
            if how == "count":
                out = pc.fill_null(values[0].cast(pa.int64()), 0)
            elif how == "avg":
                total, count = values[0].cast(pa.float64()), values[1].cast(pa.float64())
                out = pc.if_else(pc.fill_null(pc.equal(count, 0.0), True), pa.scalar(None, pa.float64()),
                                 pc.divide(total, count))
            elif how.endswith("?"):  # a running sum/min/max: NULL where no value was counted
                counted = pc.fill_null(pc.greater(values[1].cast(pa.int64()), 0), False)
                out = pc.if_else(counted, values[0].cast(kind), pa.scalar(None, kind))
            else:
                out = values[0].cast(kind)
            names.append(f"__a{i}")
            arrays.append(out)
        return pa.RecordBatch.from_arrays(arrays, names=names)

    def _time(self, seconds: Any) -> pa.Array:
        seconds = seconds.cast(pa.float64())
        kind = self.time_type
        if kind is None or not pa.types.is_timestamp(kind):
            return seconds if kind is None or pa.types.is_floating(kind) else seconds.cast(kind)
        ticks = pc.round(pc.multiply(seconds, float(_UNITS[kind.unit])))
        return ticks.cast(pa.int64()).cast(kind)


@dataclass(frozen=True, slots=True)
class Final:
    """Positional names, derived columns, then HAVING and the SELECT list."""

    positional: tuple[str, ...]
    derive: Derive
    project: Project

    def __call__(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        return self.project(self.derive(Positional(self.positional)(batch)))


def _bounds(name: str) -> dict[str, str]:
    return {f"{name}.start": "__window_start", f"{name}.end": "__window_end", name: "__window",
            f"window_time({name})": "__window_time"}


def final_projection(planner: Planner, select: exp.Select, source: Relation, grouping: Grouping,
                     merged: DataStream, part_names: list[str], key_types: tuple[pa.DataType, ...],
                     aggregate_parts: list[tuple[str, tuple[int, ...], pa.DataType]], windowed: bool,
                     relation: type[Relation], time_key: int | None = None) -> Relation:
    """The grouped rows' final projection; its output has an event time when the SELECT list
    keeps the window's end or the event-time key (`timing`)."""
    query = planner.query
    positional = ("__key", *(["__wstart", "__wend"] if windowed else []), *part_names)
    aggregates = tuple((how, tuple(part_names[p] for p in parts), kind) for how, parts, kind in aggregate_parts)
    time_type = source.schema.field(source.event_time).type if windowed and source.event_time else None
    derive = Derive(key_types, windowed, time_type, aggregates)
    columns = [*positional, *[f"__g{j}" for j in range(len(key_types))],
               *(["__window_start", "__window_end", "__window", "__window_time"] if windowed else []),
               *[f"__a{i}" for i in range(len(aggregates))]]
    scope = Scope({(None, c): c for c in columns}, query)
    for j, key in enumerate(grouping.keys):
        scope.rewrites[key_of(key)] = f"__g{j}"
        if isinstance(key, exp.Column):
            scope.rewrites[key.name.lower()] = f"__g{j}"
            for qualifier in source.qualifiers:
                scope.rewrites[f"{qualifier.lower()}.{key.name.lower()}"] = f"__g{j}"
    for i, node in enumerate(grouping.aggregates):
        scope.rewrites[key_of(node)] = f"__a{i}"
    if grouping.window is not None:
        scope.rewrites.update(_bounds(grouping.window.name.lower()))
        scope.rewrites[key_of(grouping.window)] = "__window"
    names, outputs = [], []
    for node in select.expressions:
        if isinstance(node, exp.Star) or (isinstance(node, exp.Column) and isinstance(node.this, exp.Star)):
            raise refuse(node, query, "* in a grouped query: name the keys and aggregates")
        names.append(output_name(node))
        outputs.append(_compiled(node, scope, query))
    having = select.args.get("having")
    where: Expr | None = _compiled(having.this, scope, query) if having else None
    project = Project(None, where, tuple(names), tuple(outputs))
    final = Final(positional, derive, project)
    schema = planner.output_schema(final, positional, merged_types(key_types, windowed, part_names, aggregates),
                                   names)
    time = output_time(select, names, grouping.window, scope, time_key) if windowed else None
    if time is not None and not _is_time(schema.field(time).type):
        time = None
    if time is None:
        stream = merged.map_batches(final, name=planner.name("select"))
    else:
        on_time = grouping.window is None  # GROUP BY the event-time column: windows of TICK
        stream = retimed(merged, final, planner.name("select"), time, TICK if on_time else None)
    planner.stable(stream)
    return relation(stream, schema, time, (), updates=not windowed)


def _is_time(kind: pa.DataType) -> bool:
    return bool(pa.types.is_timestamp(kind) or pa.types.is_integer(kind) or pa.types.is_floating(kind))


def merged_types(key_types: tuple[pa.DataType, ...], windowed: bool, part_names: list[str],
                 aggregates: tuple[tuple[str, tuple[str, ...], pa.DataType], ...]) -> list[pa.DataType]:
    """Types of an empty merged batch: enough to type the final projection before the job runs
    (a part of min or max has the aggregate's type: a time stays a time; others are numbers)."""
    key = key_types[0] if len(key_types) == 1 else (pa.string() if key_types else pa.int32())
    typed = {ps[0]: kind for how, ps, kind in aggregates if how in ("min", "max")}
    return [key, *([pa.float64(), pa.float64()] if windowed else []),
            *[typed.get(p, pa.float64()) for p in part_names]]


def _compiled(node: exp.Expr, scope: Scope, query: str) -> Expr:
    for column in node.find_all(exp.Column):
        text = key_of(column)
        inside = any(key_of(a) in scope.rewrites for a in column.iter_expressions()) or \
            _covered(column, scope)
        if text not in scope.rewrites and not inside and (None, column.name) not in scope.columns:
            raise refuse(column, query, f"column {column.sql(dialect='spark')} is neither in GROUP BY nor "
                                        "inside an aggregate")
    return compile_expression(node, scope)


def _covered(node: exp.Expr, scope: Scope) -> bool:
    parent = node.parent
    while parent is not None:
        if key_of(parent) in scope.rewrites:
            return True
        parent = parent.parent
    return False


def output_name(node: exp.Expr) -> str:
    """The column name Spark gives a SELECT item: its alias, a column's name, else its SQL text."""
    if isinstance(node, exp.Alias):
        return str(node.alias)
    if isinstance(node, exp.Column):
        return str(node.name)
    return str(node.sql(dialect="spark"))
