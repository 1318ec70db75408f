"""Scalar expressions compiled to pyarrow.compute over whole Arrow batches (no Python per row).

`compile_expression(node, scope)` turns a sqlglot expression into an `Expr`: a function of a
`pyarrow.RecordBatch` that returns an Arrow array (or a scalar, for a constant). Semantics follow
Spark SQL: three-valued logic (`AND`/`OR` are Kleene's), `/` always divides as doubles (and a
division by zero is NULL, Spark's non-ANSI result), comparisons with NULL are NULL, `CASE` without
`ELSE` is NULL. Functions are looked up by name in `FUNCTIONS` (the ones pyarrow.compute covers);
anything else is refused with its position.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from sqlglot import exp

from .errors import refuse

Value = Any  # a pyarrow Array, ChunkedArray or Scalar
Expr = Callable[[pa.RecordBatch], Value]


@dataclass(slots=True)
class Scope:
    """The columns an expression may name: `(qualifier or None, name)` -> the batch's column.

    `query` is the whole query text (positions in errors); `rewrites` maps the SQL text of an
    expression (an aggregate, a grouping key) to the column that already holds its value."""

    columns: dict[tuple[str | None, str], str]
    query: str
    rewrites: dict[str, str] = field(default_factory=dict)

    @staticmethod
    def of(names: list[str], query: str, qualifiers: tuple[str, ...] = ()) -> Scope:
        columns: dict[tuple[str | None, str], str] = {}
        for name in names:
            columns[(None, name.lower())] = name
            for q in qualifiers:
                columns[(q.lower(), name.lower())] = name
        return Scope(columns, query)

    def column(self, node: exp.Column) -> str:
        qualifier = node.table.lower() if node.table else None
        found = self.columns.get((qualifier, node.name.lower()))
        if found is None:
            known = sorted({n for (_, n) in self.columns if not n.startswith("__")})
            raise refuse(node, self.query, f"no column {node.sql(dialect='spark')} here (columns: {', '.join(known)})")
        return found


def key_of(node: exp.Expr) -> str:
    """The text an expression is recognised by (grouping keys, aggregates): its Spark SQL, lower case."""
    return str(node.sql(dialect="spark")).lower()


def literal(node: exp.Literal) -> pa.Scalar:
    if node.is_string:
        return pa.scalar(node.this, pa.string())
    text = node.this
    if re.fullmatch(r"[+-]?\d+", text):
        value = int(text)
        return pa.scalar(value, pa.int32() if -(2**31) <= value < 2**31 else pa.int64())
    return pa.scalar(float(text), pa.float64())


def _type(node: exp.DataType, query: str) -> pa.DataType:
    text = node.sql(dialect="spark").upper()
    base = text.split("(")[0].strip()
    types: Mapping[str, pa.DataType] = {
        "INT": pa.int32(), "INTEGER": pa.int32(), "BIGINT": pa.int64(), "LONG": pa.int64(), "SMALLINT": pa.int16(),
        "TINYINT": pa.int8(), "BYTE": pa.int8(), "SHORT": pa.int16(), "DOUBLE": pa.float64(), "FLOAT": pa.float32(),
        "REAL": pa.float32(), "STRING": pa.string(), "VARCHAR": pa.string(), "BOOLEAN": pa.bool_(),
        "DATE": pa.date32(), "TIMESTAMP": pa.timestamp("us"), "TIMESTAMP_NTZ": pa.timestamp("us"),
    }
    if base not in types:
        raise refuse(node, query, f"CAST to {text} is not supported (supported: {', '.join(sorted(types))})")
    return types[base]


def _divide(a: Value, b: Value) -> Value:
    a, b = pc.cast(a, pa.float64()), pc.cast(b, pa.float64())
    return pc.if_else(pc.equal(b, 0.0), pa.scalar(None, pa.float64()), pc.divide(a, b))


def _like(pattern: str) -> str:
    return pattern  # pyarrow's match_like takes SQL LIKE patterns (% and _) as they are


def _substring(value: Value, start: Value, length: Value | None = None) -> Value:
    begin = start.as_py()
    begin = begin - 1 if begin > 0 else begin  # Spark: 1-based; 0 is 1; negative from the end
    stop = None if length is None else (begin + length.as_py() if begin >= 0 else None)
    if begin < 0 and length is not None:
        stop = begin + length.as_py() if begin + length.as_py() < 0 else None
    return pc.utf8_slice_codeunits(value, begin, stop)


def _concat(*values: Value) -> Value:
    return pc.binary_join_element_wise(*[pc.cast(v, pa.string()) for v in values], "")


def _round(value: Value, digits: Value | None = None) -> Value:
    ndigits = 0 if digits is None else digits.as_py()
    return pc.round(value, ndigits=ndigits, round_mode="half_up")


def _coalesce(*values: Value) -> Value:
    return pc.coalesce(*values)


# Spark's datetime pattern letters -> strftime's (date_format)
_SPARK_PATTERN = [("yyyy", "%Y"), ("MM", "%m"), ("dd", "%d"), ("HH", "%H"), ("mm", "%M"), ("ss", "%S"),
                  ("yy", "%y")]

# name -> (function of the compiled arguments, which arguments must be literals (constants))
FUNCTIONS: dict[str, Callable[..., Value]] = {
    "upper": pc.utf8_upper, "lower": pc.utf8_lower, "length": pc.utf8_length, "char_length": pc.utf8_length,
    "trim": pc.utf8_trim_whitespace, "ltrim": pc.utf8_ltrim_whitespace, "rtrim": pc.utf8_rtrim_whitespace,
    "substring": _substring, "substr": _substring, "concat": _concat, "abs": pc.abs, "floor": pc.floor,
    "ceil": pc.ceil, "ceiling": pc.ceil, "sqrt": pc.sqrt, "round": _round, "coalesce": _coalesce,
    "year": pc.year, "month": pc.month, "day": pc.day, "dayofmonth": pc.day, "hour": pc.hour,
    "minute": pc.minute, "second": pc.second, "to_date": lambda v: pc.cast(v, pa.date32()),
    "exp": pc.exp, "ln": pc.ln, "log10": pc.log10, "greatest": pc.max_element_wise, "least": pc.min_element_wise,
}
_CONSTANT_ARGS = {"substring": (1, 2), "substr": (1, 2), "round": (1,)}
_BINARY: dict[type[exp.Expr], Callable[[Value, Value], Value]] = {
    exp.Add: pc.add, exp.Sub: pc.subtract, exp.Mul: pc.multiply, exp.Div: _divide,
    exp.EQ: pc.equal, exp.NEQ: pc.not_equal, exp.GT: pc.greater, exp.GTE: pc.greater_equal,
    exp.LT: pc.less, exp.LTE: pc.less_equal, exp.And: pc.and_kleene, exp.Or: pc.or_kleene,
    exp.IntDiv: lambda a, b: pc.cast(pc.divide(a, b), pa.int64()),
}


def _function_name(node: exp.Expr) -> str:
    if isinstance(node, exp.Anonymous):
        return str(node.name).lower()
    return str(node.sql_name()).lower()  # type: ignore[attr-defined]


def _arguments(node: exp.Expr) -> list[exp.Expr]:
    if isinstance(node, exp.Anonymous):
        return list(node.expressions)
    out: list[exp.Expr] = []
    for key in node.arg_types:
        value = node.args.get(key)
        if isinstance(value, list):
            out.extend(v for v in value if isinstance(v, exp.Expr))
        elif isinstance(value, exp.Expr):
            out.append(value)
    return out


def compile_expression(node: exp.Expr, scope: Scope) -> Expr:
    """The vectorized function of `node` over a batch of `scope`'s columns."""
    rewritten = scope.rewrites.get(key_of(node))
    if rewritten is not None:
        return lambda batch: batch.column(rewritten)
    if isinstance(node, exp.Paren):
        return compile_expression(node.this, scope)
    if isinstance(node, exp.Alias):
        return compile_expression(node.this, scope)
    if isinstance(node, exp.Column):
        if isinstance(node.this, exp.Star):
            raise refuse(node, scope.query, "* is only allowed as a whole projection")
        name = scope.column(node)
        return lambda batch: batch.column(name)
    if isinstance(node, exp.Literal):
        value = literal(node)
        return lambda batch: value
    if isinstance(node, exp.Boolean):
        truth = pa.scalar(bool(node.this), pa.bool_())
        return lambda batch: truth
    if isinstance(node, exp.Null):
        return lambda batch: pa.scalar(None, pa.null())
    if isinstance(node, exp.Interval):
        raise refuse(node, scope.query, "an INTERVAL is allowed only as a window size or a join's time bound")
    if type(node) in _BINARY:
        op = _BINARY[type(node)]
        left, right = compile_expression(node.args["this"], scope), compile_expression(node.args["expression"], scope)
        return lambda batch: op(left(batch), right(batch))
    if isinstance(node, exp.Mod):
        left, right = compile_expression(node.left, scope), compile_expression(node.right, scope)
        return lambda batch: _mod(left(batch), right(batch))
    if isinstance(node, exp.Neg):
        inner = compile_expression(node.this, scope)
        return lambda batch: pc.negate(inner(batch))
    if isinstance(node, exp.Not):
        inner = compile_expression(node.this, scope)
        return lambda batch: pc.invert(inner(batch))
    if isinstance(node, exp.Is):
        inner = compile_expression(node.this, scope)
        if not isinstance(node.expression, exp.Null):
            raise refuse(node, scope.query, "IS supports only IS [NOT] NULL")
        return lambda batch: pc.is_null(inner(batch))
    if isinstance(node, exp.Between):
        value = compile_expression(node.this, scope)
        low, high = compile_expression(node.args["low"], scope), compile_expression(node.args["high"], scope)
        return lambda batch: pc.and_kleene(pc.greater_equal(value(batch), low(batch)),
                                           pc.less_equal(value(batch), high(batch)))
    if isinstance(node, exp.In):
        return _compile_in(node, scope)
    if isinstance(node, (exp.Like, exp.ILike)):
        value = compile_expression(node.this, scope)
        if not (isinstance(node.expression, exp.Literal) and node.expression.is_string):
            raise refuse(node, scope.query, "LIKE needs a string literal pattern")
        pattern, ignore_case = _like(node.expression.this), isinstance(node, exp.ILike)
        return lambda batch: pc.match_like(value(batch), pattern, ignore_case=ignore_case)
    if isinstance(node, exp.Case):
        return _compile_case(node, scope)
    if isinstance(node, exp.If):
        cond = compile_expression(node.this, scope)
        then = compile_expression(node.args["true"], scope)
        other = node.args.get("false")
        otherwise = compile_expression(other, scope) if other is not None else (lambda batch: pa.scalar(None))
        return lambda batch: _if_else(cond(batch), then(batch), otherwise(batch))
    if isinstance(node, (exp.Cast, exp.TryCast)):
        inner = compile_expression(node.this, scope)
        target = _type(node.to, scope.query)
        return lambda batch: pc.cast(inner(batch), target, safe=False)
    if isinstance(node, exp.TimeToStr):  # date_format(t, pattern)
        timed = node.this.this if isinstance(node.this, exp.TimeStrToTime) else node.this  # sqlglot's implicit cast
        value = compile_expression(timed, scope)
        fmt = node.args.get("format")
        if not (isinstance(fmt, exp.Literal) and fmt.is_string):
            raise refuse(node, scope.query, "date_format needs a constant pattern")
        spark = re.findall(r"'((?:[^']|'')*)'", str(node.sql(dialect="spark")))  # Spark's own pattern back
        text = spark[-1] if spark else ""
        for letters, code in _SPARK_PATTERN:
            text = text.replace(letters, code)
        if not spark or re.search(r"[A-Za-z]", re.sub(r"%[YmdHMSy]", "", text)):
            raise refuse(node, scope.query, "date_format: only the letters yyyy, yy, MM, dd, HH, mm, ss are supported")
        return lambda batch: pc.strftime(value(batch), format=text)
    if isinstance(node, exp.AggFunc):
        raise refuse(node, scope.query, "an aggregate is allowed only in the SELECT or HAVING of a grouped query")
    if isinstance(node, exp.Func):
        return _compile_function(node, scope)
    raise refuse(node, scope.query, f"{type(node).__name__} is not supported in expressions")


def _mod(a: Value, b: Value) -> Value:
    quotient = pc.cast(pc.trunc(pc.divide(pc.cast(a, pa.float64()), pc.cast(b, pa.float64()))), pa.int64())
    return pc.subtract(a, pc.multiply(quotient, b))


def _if_else(cond: Value, then: Value, otherwise: Value) -> Value:
    cond = pc.fill_null(cond, False)  # Spark: a NULL condition takes the ELSE branch
    if isinstance(then, pa.Scalar) and pa.types.is_null(then.type) and not pa.types.is_null(otherwise.type):
        then = pa.scalar(None, otherwise.type)
    if isinstance(otherwise, pa.Scalar) and pa.types.is_null(otherwise.type) and not pa.types.is_null(then.type):
        otherwise = pa.scalar(None, then.type)
    return pc.if_else(cond, then, otherwise)


def _compile_case(node: exp.Case, scope: Scope) -> Expr:
    subject = compile_expression(node.this, scope) if node.this is not None else None
    branches = [(compile_expression(i.this, scope), compile_expression(i.args["true"], scope))
                for i in node.args.get("ifs", [])]
    default_node = node.args.get("default")
    default = compile_expression(default_node, scope) if default_node is not None else None

    def case(batch: pa.RecordBatch) -> Value:
        out = default(batch) if default is not None else pa.scalar(None)
        for when, then in reversed(branches):
            cond = when(batch) if subject is None else pc.equal(subject(batch), when(batch))
            out = _if_else(cond, then(batch), out)
        return out

    return case


def _compile_in(node: exp.In, scope: Scope) -> Expr:
    if node.args.get("query") is not None:
        raise refuse(node, scope.query, "IN (subquery) is not supported on streams")
    value = compile_expression(node.this, scope)
    items = node.expressions
    if not all(isinstance(i, exp.Literal) for i in items):
        raise refuse(node, scope.query, "IN needs a list of literals")
    constants = [literal(i).as_py() for i in items]

    def member(batch: pa.RecordBatch) -> Value:
        values = value(batch)
        return pc.is_in(values, value_set=pa.array(constants).cast(values.type, safe=False))

    return member


def _compile_function(node: exp.Func, scope: Scope) -> Expr:
    name = _function_name(node)
    function = FUNCTIONS.get(name)
    if function is None:
        raise refuse(node, scope.query, f"function {name} is not supported (supported: {', '.join(sorted(FUNCTIONS))})")
    args = _arguments(node)
    constant = _CONSTANT_ARGS.get(name, ())
    for i in constant:
        if i < len(args) and not isinstance(args[i], (exp.Literal, exp.Neg)):
            raise refuse(args[i], scope.query, f"argument {i + 1} of {name} must be a constant")
    compiled = [compile_expression(a, scope) for a in args]
    return lambda batch: function(*[c(batch) for c in compiled])


def evaluate(expr: Expr, batch: pa.RecordBatch) -> pa.Array:
    """`expr` over `batch` as an array of the batch's length (a constant repeated)."""
    out = expr(batch)
    if isinstance(out, pa.Scalar):
        return pa.repeat(out, batch.num_rows)
    if isinstance(out, pa.ChunkedArray):
        return out.combine_chunks()
    return out


def check(node: exp.Expr, expr: Expr, sample: pa.RecordBatch, query: str) -> pa.DataType:
    """The type of `expr` on an empty batch of the input's schema: a type error shows before the job runs."""
    try:
        return evaluate(expr, sample).type
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as error:
        raise refuse(node, query, f"cannot be computed: {error}".splitlines()[0]) from None
