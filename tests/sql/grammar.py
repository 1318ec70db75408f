"""A small grammar of the SQL Epochal supports on streams, for differential tests (hypothesis).

`rows()` draws a finite input (event time ascending, ties allowed); `queries()` draws a query
over view `t`: a projection with a filter, or a grouped query over a tumbling, sliding or session
window with keys and aggregates; an interval join, also under a window. Every query names its
columns, so results compare by name.
"""

from __future__ import annotations

import datetime as dt
import decimal
import math
from typing import Any

import pyarrow as pa
from hypothesis import strategies as st

SCHEMA = pa.schema([("k", pa.string()), ("g", pa.int32()), ("x", pa.int64()), ("y", pa.int32()),
                    ("d", pa.float64()), ("ts", pa.timestamp("us"))])
DDL = "k STRING, g INT, x BIGINT, y INT, d DOUBLE, ts TIMESTAMP"
EPOCH = dt.datetime(2024, 1, 1)


@st.composite
def rows(draw: Any) -> list[dict[str, Any]]:
    n = draw(st.integers(1, 40))
    seconds = sorted(draw(st.lists(st.integers(0, 90), min_size=n, max_size=n)))
    out = []
    for s in seconds:
        out.append({
            "k": draw(st.sampled_from(["a", "b", "ab", "c"])),
            "g": draw(st.integers(-2, 3)),
            "x": draw(st.integers(-50, 100)),
            "y": draw(st.one_of(st.none(), st.integers(0, 5))),
            "d": draw(st.sampled_from([0.5, 1.25, -2.0, 3.0, 10.5])),
            "ts": EPOCH + dt.timedelta(seconds=s, milliseconds=draw(st.sampled_from([0, 250, 500]))),
        })
    # in event-time order (the views' watermark delay is 0: a row behind the newest would be late,
    # dropped by a stream and counted by Spark's batch answer)
    return sorted(out, key=lambda r: r["ts"])


NUMERIC = ["x", "g", "d", "x + g", "x * 2", "g - 1", "abs(g - 1)", "x % 3", "d / 2", "CAST(x AS DOUBLE)",
           "coalesce(y, 0)", "CASE WHEN x > 10 THEN x ELSE g END", "length(k)"]
STRINGS = ["k", "upper(k)", "concat(k, 'z')", "CASE WHEN g > 0 THEN 'pos' ELSE 'neg' END", "substring(k, 1, 1)"]
CONDITIONS = ["x > 10", "y IS NULL", "y IS NOT NULL", "k IN ('a', 'b')", "k LIKE 'a%'", "g BETWEEN 0 AND 2",
              "NOT (g = 1)", "d < 1", "x % 2 = 0", "hour(ts) = 0", "second(ts) < 30"]


@st.composite
def condition(draw: Any) -> str:
    first = draw(st.sampled_from(CONDITIONS))
    if draw(st.booleans()):
        return first
    return f"({first}) {draw(st.sampled_from(['AND', 'OR']))} ({draw(st.sampled_from(CONDITIONS))})"


@st.composite
def projection(draw: Any) -> str:
    items = draw(st.lists(st.sampled_from(NUMERIC + STRINGS + ["y", "ts"]), min_size=1, max_size=4, unique=True))
    select = ", ".join(f"{e} AS c{i}" for i, e in enumerate(items))
    where = f" WHERE {draw(condition())}" if draw(st.booleans()) else ""
    return f"SELECT {select} FROM t{where}"


AGGREGATES = ["count(*)", "count(y)", "sum(x)", "sum(d)", "min(x)", "max(g)", "avg(y)", "avg(x)",
              "count(DISTINCT g)", "min(k)", "max(d)", "sum(x * 2)"]


@st.composite
def grouped(draw: Any) -> str:
    keys = draw(st.lists(st.sampled_from(["k", "g", "upper(k)"]), max_size=2, unique=True))
    window = draw(st.sampled_from([
        "window(ts, '10 seconds')", "window(ts, '20 seconds', '5 seconds')", "window(ts, '15 seconds', '10 seconds')",
        "session_window(ts, '4 seconds')", "window(ts, '1 minute')"]))
    bounds = "session_window" if window.startswith("session") else "window"
    aggregates = draw(st.lists(st.sampled_from(AGGREGATES), min_size=1, max_size=4, unique=True))
    items = [f"{k} AS k{i}" for i, k in enumerate(keys)]
    items += [f"{bounds}.start AS ws", f"{bounds}.end AS we"]
    items += [f"{a} AS a{i}" for i, a in enumerate(aggregates)]
    where = f" WHERE {draw(condition())}" if draw(st.booleans()) else ""
    having = " HAVING count(*) > 1" if draw(st.integers(0, 4)) == 0 else ""
    return f"SELECT {', '.join(items)} FROM t{where} GROUP BY {', '.join([*keys, window])}{having}"


@st.composite
def combined(draw: Any) -> str:
    """WITH and UNION ALL over projections."""
    first, second = draw(condition()), draw(condition())
    if draw(st.booleans()):
        return (f"WITH w AS (SELECT k, x + 1 AS x1, ts FROM t WHERE {first}) "
                f"SELECT k AS c0, x1 * 2 AS c1 FROM w WHERE x1 > 0")
    return (f"SELECT k AS c0, x AS c1 FROM t WHERE {first} "
            f"UNION ALL SELECT upper(k) AS c0, g AS c1 FROM t WHERE {second}")


@st.composite
def joined(draw: Any) -> str:
    """An interval join of t and u (inner, left outer; an extra condition in an inner join's ON)."""
    lower, upper = draw(st.integers(0, 5)), draw(st.integers(0, 10))
    left = draw(st.booleans())
    extra = "" if left or draw(st.booleans()) else " AND u.x > t.x"
    keys = draw(st.sampled_from(["t.k = u.k", "t.g = u.g", "t.k = u.k AND t.g = u.g"]))
    where = f" WHERE t.{draw(st.sampled_from(['x > 10', 'y IS NOT NULL', 'd < 1']))}" if draw(st.booleans()) else ""
    return (f"SELECT t.k AS k, t.x AS x, t.ts AS ts, u.x AS ux, u.ts AS uts FROM t {'LEFT ' if left else ''}JOIN u "
            f"ON {keys} AND u.ts BETWEEN t.ts - INTERVAL {lower} SECONDS AND t.ts + INTERVAL {upper} SECONDS"
            f"{extra}{where}")


@st.composite
def joined_windows(draw: Any) -> str:
    """A window over an interval join's output, on the left's event time (inner or left outer)."""
    lower, upper = draw(st.integers(0, 5)), draw(st.integers(0, 10))
    left = draw(st.booleans())
    keys = draw(st.sampled_from(["t.k = u.k", "t.g = u.g"]))
    window = draw(st.sampled_from(["window(t.ts, '10 seconds')", "window(t.ts, '20 seconds', '5 seconds')"]))
    aggregates = draw(st.lists(st.sampled_from(["count(*)", "count(u.x)", "sum(u.x)", "max(t.x)", "min(u.g)"]),
                               min_size=1, max_size=3, unique=True))
    items = ", ".join(f"{a} AS a{i}" for i, a in enumerate(aggregates))
    return (f"SELECT t.k AS k, window.start AS ws, window.end AS we, {items} FROM t {'LEFT ' if left else ''}JOIN u "
            f"ON {keys} AND u.ts BETWEEN t.ts - INTERVAL {lower} SECONDS AND t.ts + INTERVAL {upper} SECONDS "
            f"GROUP BY t.k, {window}")


def queries() -> st.SearchStrategy[str]:
    return st.one_of(projection(), grouped(), combined(), joined(), joined_windows())


def normal(value: Any) -> Any:
    """A value as both engines' results compare: floats to 9 significant digits, Decimals as floats."""
    if isinstance(value, decimal.Decimal):
        value = float(value)
    if isinstance(value, float):
        return float(f"{value:.9g}") if math.isfinite(value) else value
    return value


def canonical(rows: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    """Rows as sorted tuples of normalised values (a multiset: streams have no order)."""
    out = [tuple(normal(v) for v in r.values()) for r in rows]
    return sorted(out, key=lambda r: tuple((v is None, str(type(v)), v if v is not None else 0) for v in r))


@st.composite
def chained(draw: Any) -> str:
    """An aggregate or a join over a windowed aggregate's output, on its window's end `we` (its
    event time): a GROUP BY on `we`, a window over `we`, or the rows with the window's maximum."""
    key = draw(st.sampled_from(["k", "g"]))
    window = draw(st.sampled_from(["window(ts, '10 seconds')", "window(ts, '20 seconds', '5 seconds')"]))
    aggregate = draw(st.sampled_from(["count(*)", "sum(x)", "max(g)", "min(x)"]))
    where = f" WHERE {draw(condition())}" if draw(st.booleans()) else ""
    inner = (f"WITH c AS (SELECT {key} AS k0, {aggregate} AS a0, window.start AS ws, window.end AS we "
             f"FROM t{where} GROUP BY {key}, {window}) ")
    outer = draw(st.sampled_from([
        "SELECT we, max(a0) AS m, count(*) AS n, sum(a0) AS s FROM c GROUP BY we",
        "SELECT we, k0, min(ws) AS first FROM c GROUP BY k0, we HAVING count(*) > 0",
        "SELECT window.start AS ws2, window.end AS we2, count(*) AS n, max(a0) AS m FROM c "
        "GROUP BY window(we, '30 seconds')",
        "SELECT c.k0, c.a0, c.ws, c.we FROM c JOIN (SELECT max(a0) AS m, we FROM c GROUP BY we) x "
        "ON c.we = x.we AND c.a0 = x.m",
    ]))
    return inner + outer
