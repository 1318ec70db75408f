"""GROUP BY on streams: keys, `window(ts, size[, slide])`, `session_window(ts, gap)`, and the
aggregates count/sum/min/max/avg/count(DISTINCT), compiled onto Epochal's operators.

- With a window: one keyed window operator per aggregate *part* (count(*), count(x), sum(x),
  min(x), max(x), count(DISTINCT x); avg(x) is sum(x) / count(x)), on the shared-slice windows
  (dissertation ch. 5: a record updates one slice, not every window it is in; the columnar slice
  table for count/sum/min/max of periodic windows). A window's row goes out once, when the
  watermark passes its end (Spark's append mode); several parts are joined back per key and
  window by `merge.WindowParts`.
- Without a window: a running aggregate per key on the columnar keyed aggregates
  (`plan.aggregates.KeyedAggregateSpec`, one call per part), emitted per record or per checkpoint
  (`emit`): each emitted row is the key's current result (Spark's update mode).

Rows whose value is NULL do not count (Spark's aggregates skip NULLs): they are filtered before a
window part; a running aggregate counts valid values in a part of its own.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from sqlglot import exp

from ..plan.aggregates import AggregateCall, AggregateKind, KeyedAggregateSpec
from ..plan.specs import Emit, OnError
from ..plan.windows import Session, Sliding, Tumbling
from .errors import parse_duration, refuse
from .expressions import Expr, compile_expression, key_of
from .merge import CountDistinct, Tag, WindowParts
from .timing import key_window, time_key

if TYPE_CHECKING:
    from ..api.stream import DataStream
    from .planner import Planner, Relation

AGGREGATES = (exp.Count, exp.Sum, exp.Min, exp.Max, exp.Avg)


@dataclass(frozen=True, slots=True)
class Part:
    """One aggregate an operator computes: `kind` (count_star, count, sum, min, max, distinct) of
    value column `value` (None for count(*))."""

    kind: str
    value: str | None


@dataclass(slots=True)
class Grouping:
    """What a grouped SELECT needs: keys, the window, the aggregates and their parts."""

    keys: list[exp.Expr] = field(default_factory=list)
    window: exp.Anonymous | None = None
    aggregates: list[exp.AggFunc] = field(default_factory=list)  # distinct by their SQL
    values: list[exp.Expr] = field(default_factory=list)  # distinct aggregate arguments
    parts: list[Part] = field(default_factory=list)

    def part(self, kind: str, value: str | None) -> int:
        wanted = Part(kind, value)
        if wanted not in self.parts:
            self.parts.append(wanted)
        return self.parts.index(wanted)


def is_grouped(select: exp.Select) -> bool:
    return bool(select.args.get("group")) or any(
        isinstance(n, AGGREGATES) for e in select.expressions for n in e.walk())


def collect(select: exp.Select, query: str) -> Grouping:
    grouping = Grouping()
    group = select.args.get("group")
    for node in group.expressions if group else []:
        if isinstance(node, exp.Anonymous) and node.name.lower() in ("window", "session_window"):
            if grouping.window is not None:
                raise refuse(node, query, "one window per GROUP BY")
            grouping.window = node
        else:
            grouping.keys.append(node)
    seen: set[str] = set()
    having = select.args.get("having")
    for root in [*select.expressions, *([having.this] if having else [])]:
        for node in root.walk():
            if isinstance(node, exp.AggFunc):
                if not isinstance(node, AGGREGATES):
                    raise refuse(node, query, "supported aggregates: count, sum, min, max, avg, count(DISTINCT)")
                if key_of(node) not in seen:
                    seen.add(key_of(node))
                    grouping.aggregates.append(node)
    return grouping


def _argument(node: exp.AggFunc, query: str) -> tuple[exp.Expr | None, bool]:
    """(the aggregate's argument, or None for count(*); DISTINCT)."""
    arg = node.this
    distinct = isinstance(arg, exp.Distinct)
    if distinct:
        if not isinstance(node, exp.Count) or len(arg.expressions) != 1:
            raise refuse(node, query, "DISTINCT only in count(DISTINCT x) of one expression")
        arg = arg.expressions[0]
    if isinstance(arg, exp.Star) or (isinstance(node, exp.Count) and isinstance(arg, exp.Literal)):
        return None, False
    return arg, distinct


def window_of(node: exp.Anonymous, event_time: str | None, query: str) -> Any:
    """The window definition of `window(ts, size[, slide])` or `session_window(ts, gap)`."""
    args = node.expressions
    session = node.name.lower() == "session_window"
    if not args or not isinstance(args[0], exp.Column) or event_time is None \
            or args[0].name.lower() != event_time.lower():
        raise refuse(node, query, f"the window's time must be the view's event-time column ({event_time or 'none'}): "
                     "create_view(..., event_time=...)")
    sizes = []
    for arg in args[1:]:
        text = arg.this if isinstance(arg, exp.Literal) and arg.is_string else arg.sql(dialect="spark")
        seconds = parse_duration(str(text))
        if seconds is None or seconds <= 0:
            raise refuse(arg, query, "a window size is a positive duration like '10 seconds' (no months or years)")
        sizes.append(seconds)
    if session:
        if len(sizes) != 1:
            raise refuse(node, query, "session_window(time, gap) takes one gap")
        return Session(sizes[0])
    if len(sizes) == 1:
        return Tumbling(sizes[0])
    if len(sizes) == 2:
        return Sliding(sizes[0], sizes[1])
    raise refuse(node, query, "window(time, size[, slide]) (a start offset is not supported)")


@dataclass(frozen=True, slots=True)
class Keys:
    """The key column of the grouped batch: one key as it is, several encoded (`merge.encode_keys`),
    none as a constant."""

    exprs: tuple[Expr, ...]

    def __call__(self, batch: pa.RecordBatch) -> pa.Array:
        from .expressions import evaluate
        from .merge import encode_keys

        if not self.exprs:
            return pa.repeat(pa.scalar(0, pa.int32()), batch.num_rows)
        if len(self.exprs) == 1:
            key = evaluate(self.exprs[0], batch)
            if pa.types.is_timestamp(key.type) or pa.types.is_date(key.type):
                return key.cast(pa.int64())  # a time as a key: its ticks (cast back after the aggregate)
            return key
        return encode_keys([evaluate(e, batch) for e in self.exprs])


@dataclass(frozen=True, slots=True)
class NotNull:
    """The rows of a window part's columns whose value is not NULL."""

    columns: tuple[str, ...]

    def __call__(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        out = batch.select(list(self.columns))
        value = self.columns[-1]
        if value.startswith("__v") and out.column(value).null_count:
            out = out.filter(pc.is_valid(out.column(value)))
        return out


def plan_grouped(planner: Planner, select: exp.Select, source: Relation) -> Relation:
    """The relation a grouped SELECT produces."""
    from .planner import Relation

    query = planner.query
    if source.updates:
        raise refuse(select, query, "an aggregate over a GROUP BY without a window: its rows are updates of "
                                    "a key's result (Spark SS refuses it too); GROUP BY a window or the event-time "
                                    "column")
    grouping = collect(select, query)
    scope = source.scope(query)
    window = window_of(grouping.window, source.event_time, query) if grouping.window is not None else None
    if grouping.window is not None and scope.column(grouping.window.expressions[0]) != source.event_time:
        raise refuse(grouping.window, query, f"the window's time must be the event-time column {source.event_time} "
                                             "(after a join: the left side's)")
    on_time = time_key(grouping.keys, scope, source.event_time) if window is None else None
    if on_time is not None:  # GROUP BY the event-time column: a group closes when the watermark passes it
        window = key_window()
    if window is None and planner.emit is None:
        raise refuse(select, query, "a GROUP BY without a window runs forever: env.sql(query, emit='per_record' "
                                    "or 'on_checkpoint') says when its running results go out")
    key_exprs = tuple(compile_expression(k, scope) for k in grouping.keys)
    key_types = tuple(planner.type_of(k, e, source) for k, e in zip(grouping.keys, key_exprs))
    # the pre-projection: __key, the event time (windows), __v<i> per distinct aggregate argument
    names: list[str] = ["__key"]
    outputs: list[Expr] = [Keys(key_exprs)]
    if window is not None:
        assert source.event_time is not None
        names.append(source.event_time)
        outputs.append(compile_expression(exp.column(source.event_time), scope))
    value_types: dict[str, pa.DataType] = {}
    aggregate_parts: list[tuple[str, tuple[int, ...], pa.DataType]] = []  # (how, parts, result type)
    for node in grouping.aggregates:
        arg, distinct = _argument(node, query)
        if arg is None:
            aggregate_parts.append(("count", (grouping.part("count_star", None),), pa.int64()))
            continue
        text = key_of(arg)
        if text not in [key_of(v) for v in grouping.values]:
            grouping.values.append(arg)
            compiled = compile_expression(arg, scope)
            column = f"__v{len(grouping.values) - 1}"
            names.append(column)
            outputs.append(compiled)
            value_types[column] = planner.type_of(arg, compiled, source)
        column = f"__v{[key_of(v) for v in grouping.values].index(text)}"
        kind = value_types[column]
        if isinstance(node, exp.Count):
            how = "distinct" if distinct else "count"
            aggregate_parts.append(("count", (grouping.part(how, column),), pa.int64()))
            if window is None and f"__valid{column}" not in names:
                names.append(f"__valid{column}")
                outputs.append(ValidOf(outputs[names.index(column)]))
        elif isinstance(node, exp.Avg):
            total = column if window is not None else _filled(names, outputs, column, "sum", kind, node, query)
            aggregate_parts.append(("avg", (grouping.part("sum", total), grouping.part("count", column)),
                                    pa.float64()))
            if window is None and f"__valid{column}" not in names:
                names.append(f"__valid{column}")
                outputs.append(ValidOf(outputs[names.index(column)]))
        else:
            name = type(node).__name__.lower()
            if name == "sum" and not (pa.types.is_integer(kind) or pa.types.is_floating(kind)):
                raise refuse(node, query, f"sum of {kind}: a number is needed")
            result = (pa.int64() if pa.types.is_integer(kind) else pa.float64()) if name == "sum" else kind
            if window is not None:
                aggregate_parts.append((name, (grouping.part(name, column),), result))
            else:  # running: NULLs filled with what changes nothing; NULL out where no value counted
                filled = _filled(names, outputs, column, name, kind, node, query)
                if f"__valid{column}" not in names:
                    names.append(f"__valid{column}")
                    outputs.append(ValidOf(outputs[names.index(column)]))
                aggregate_parts.append((f"{name}?", (grouping.part(name, filled), grouping.part("count", column)),
                                        result))
    if not grouping.parts:  # GROUP BY without aggregates: the groups' rows are counted, the count unused
        grouping.part("count_star", None)
    pre = planner.project(source, names, outputs, planner.where(select, source), role="group-input")
    if window is not None:
        merged, part_names = _windowed(planner, pre, grouping, window, source.event_time or "")
    else:
        merged, part_names = _running(planner, pre, grouping)
    return _final(planner, select, source, grouping, merged, part_names, key_types, aggregate_parts,
                  window is not None, Relation, on_time)


@dataclass(frozen=True, slots=True)
class Filled:
    """An aggregate's argument with NULL replaced by `fill` (a running aggregate's columnar path
    takes no NULLs)."""

    expr: Expr
    fill: Any

    def __call__(self, batch: pa.RecordBatch) -> pa.Array:
        from .expressions import evaluate

        return pc.fill_null(evaluate(self.expr, batch), self.fill)


def _filled(names: list[str], outputs: list[Expr], column: str, how: str, kind: pa.DataType, node: exp.Expr,
            query: str) -> str:
    """The column of `column` with NULLs filled for `how` (sum: 0, min: the largest value, max: the
    smallest), added to the pre-projection once."""
    name = f"__{how}{column}"
    if name in names:
        return name
    if how == "sum":
        fill = pa.scalar(0, kind)
    elif pa.types.is_integer(kind):
        info = np.iinfo(kind.to_pandas_dtype())
        fill = pa.scalar(int(info.max if how == "min" else info.min), kind)
    elif pa.types.is_floating(kind):
        fill = pa.scalar(float("inf") if how == "min" else float("-inf"), kind)
    else:  # the columnar keyed aggregates take numbers
        raise refuse(node, query, f"{how} of {kind} without a window is not supported (with a window it is)")
    names.append(name)
    outputs.append(Filled(outputs[names.index(column)], fill))
    return name


def _windowed(planner: Planner, pre: DataStream, grouping: Grouping, window: Any,
              event_time: str) -> tuple[DataStream, list[str]]:
    results = []
    for i, part in enumerate(grouping.parts):
        columns = ("__key", event_time) if part.value is None else ("__key", event_time, part.value)
        selected = pre.map_batches(NotNull(columns), name=planner.name(f"part{i}-rows"))
        planner.stable(selected)
        windowed = selected.key_by("__key").window(window)
        name = planner.name(f"window{i}-{part.kind}")
        if part.kind in ("count_star", "count"):
            out = windowed.count(name=name)
        elif part.kind == "distinct":
            out = windowed.aggregate(CountDistinct(), name=name)
        else:
            out = getattr(windowed, part.kind)(part.value, name=name)
        results.append(out.uid(name))
    if len(results) == 1:
        return results[0], ["__p0"]
    tagged = []
    for i, stream in enumerate(results):
        tagged_stream = stream.map_batches(Tag(i), name=planner.name(f"part{i}-tag"))
        planner.stable(tagged_stream)
        tagged.append(tagged_stream)
    union = tagged[0].union(*tagged[1:], name=planner.name("parts"))
    planner.stable(union)
    joined = union.key_by("__key").process(WindowParts(len(results)), name=planner.name("window-rows"))
    planner.stable(joined)
    return joined, [f"__p{i}" for i in range(len(results))]


_RUNNING = {"count_star": AggregateKind.COUNT, "sum": AggregateKind.SUM, "min": AggregateKind.MIN,
            "max": AggregateKind.MAX}


def _running(planner: Planner, pre: DataStream, grouping: Grouping) -> tuple[DataStream, list[str]]:
    calls = []
    for i, part in enumerate(grouping.parts):
        if part.kind == "distinct":
            raise refuse(grouping.aggregates[0], planner.query,
                         "count(DISTINCT) needs a window on a stream (its set of values would grow forever)")
        if part.kind == "count":  # count(x): the sum of 1 per non-NULL x
            calls.append(AggregateCall(AggregateKind.SUM, f"__valid{part.value}", None, f"__p{i}"))
        else:
            calls.append(AggregateCall(_RUNNING[part.kind], part.value, None, f"__p{i}"))
    keyed = pre.key_by("__key")
    emit: Emit = "on_checkpoint" if planner.emit == "on_checkpoint" else "per_record"
    name = planner.name("aggregate")
    spec_calls = tuple(calls)
    out = keyed._add(lambda n: KeyedAggregateSpec(n, n, "__key", spec_calls, emit, OnError.FAIL,
                                                  emit == "on_checkpoint"), "aggregate", name)
    return out.uid(name), [f"__p{i}" for i in range(len(calls))]


@dataclass(frozen=True, slots=True)
class ValidOf:
    """1 where an expression is not NULL, else 0 (count(x) of a running aggregate sums it)."""

    expr: Expr

    def __call__(self, batch: pa.RecordBatch) -> pa.Array:
        from .expressions import evaluate

        return pc.cast(pc.is_valid(evaluate(self.expr, batch)), pa.int64())


def _final(planner: Planner, select: exp.Select, source: Relation, grouping: Grouping, merged: DataStream,
           part_names: list[str], key_types: tuple[pa.DataType, ...],
           aggregate_parts: list[tuple[str, tuple[int, ...], pa.DataType]], windowed: bool,
           relation: type[Relation], on_time: int | None) -> Relation:
    from .finals import final_projection

    return final_projection(planner, select, source, grouping, merged, part_names, key_types, aggregate_parts,
                            windowed, relation, on_time)
