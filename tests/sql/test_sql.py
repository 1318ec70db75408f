"""env.sql in process: projections, windows, running aggregates, WITH, UNION ALL, EXPLAIN, uids, refusals."""

from __future__ import annotations

import datetime as dt
import re
from collections import Counter
from typing import Any

import pyarrow as pa
import pytest

from epochal import StreamEnvironment
from epochal.sql import SqlError
from epochal.testing import ListSource

from .grammar import DDL, EPOCH
from .runner import epochal_rows


def _rows(n: int = 30) -> list[dict[str, Any]]:
    return [{"k": "a" if i % 3 else "b", "g": i % 4, "x": i, "y": None if i % 5 == 0 else i % 4, "d": i / 2,
             "ts": EPOCH + dt.timedelta(seconds=i)} for i in range(n)]


def _env() -> StreamEnvironment:
    env = StreamEnvironment(parallelism=2, executor="inprocess")
    env.create_view("t", env.from_source(ListSource(_rows(), batch_size=4)), schema=DDL, event_time="ts")
    return env


def test_a_projection_with_a_filter_computes_spark_s_expressions() -> None:
    got = epochal_rows("SELECT x, upper(k) AS u, x / 4 AS q, CASE WHEN x > 20 THEN 'big' ELSE 'small' END AS size, "
                       "coalesce(y, -1) AS y1 FROM t WHERE x % 7 = 0 AND k LIKE 'a%'", _rows())
    assert sorted(got, key=lambda r: r["x"]) == [
        {"x": 7, "u": "A", "q": 1.75, "size": "small", "y1": 3},
        {"x": 14, "u": "A", "q": 3.5, "size": "small", "y1": 2},
        {"x": 28, "u": "A", "q": 7.0, "size": "big", "y1": 0},
    ]


def _reference(rows: list[dict[str, Any]], size: int) -> Counter[tuple[Any, ...]]:
    groups: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for r in rows:
        second = int((r["ts"] - EPOCH).total_seconds())
        start = EPOCH + dt.timedelta(seconds=second - second % size)
        groups.setdefault((r["k"], start), []).append(r)
    out: Counter[tuple[Any, ...]] = Counter()
    for (k, start), members in groups.items():
        ys = [m["y"] for m in members if m["y"] is not None]
        out[(k, start, start + dt.timedelta(seconds=size), len(members), sum(m["x"] for m in members),
             sum(ys) / len(ys) if ys else None, len(set(ys)), max(m["d"] for m in members))] += 1
    return out


def test_a_tumbling_window_with_several_aggregates_equals_a_reference() -> None:
    got = epochal_rows("SELECT k, window.start AS s, window.end AS e, count(*) AS n, sum(x) AS sx, avg(y) AS ay, "
                       "count(DISTINCT y) AS dy, max(d) AS md FROM t GROUP BY k, window(ts, '10 seconds')", _rows())
    assert Counter(tuple(r.values()) for r in got) == _reference(_rows(), 10)


def test_one_aggregate_runs_one_window_operator_and_sessions_close_on_the_gap() -> None:
    rows = [{"k": "a", "g": 0, "x": 1, "y": 1, "d": 1.0, "ts": EPOCH + dt.timedelta(seconds=s)} for s in (0, 2, 9, 10)]
    got = epochal_rows("SELECT session_window.start AS s, session_window.end AS e, count(*) AS n FROM t "
                       "GROUP BY session_window(ts, '3 seconds')", rows)
    seconds = sorted(((r["s"] - EPOCH).total_seconds(), (r["e"] - EPOCH).total_seconds(), r["n"]) for r in got)
    assert seconds == [(0.0, 5.0, 2), (9.0, 13.0, 2)]
    plan = _env().explain("SELECT count(*) AS n FROM t GROUP BY window(ts, '5 seconds')")
    assert plan.count("KeyedWindow") == 1 and "KeyedProcess" not in plan


def test_a_running_aggregate_emits_per_record_or_per_checkpoint_and_ends_at_the_batch_answer() -> None:
    query = "SELECT k, count(*) AS n, sum(x) AS sx, count(y) AS cy, avg(x) AS ax FROM t GROUP BY k"
    expected = {}
    for r in _rows():
        n, sx, cy = expected.get(r["k"], (0, 0, 0))[:3]
        expected[r["k"]] = (n + 1, sx + r["x"], cy + (r["y"] is not None))
    for emit in ("per_record", "on_checkpoint"):
        got = epochal_rows(query, _rows(), emit=emit)
        last = {r["k"]: (r["n"], r["sx"], r["cy"]) for r in got}
        assert last == expected, emit
        assert all(r["ax"] == pytest.approx(r["sx"] / r["n"]) for r in got)
    with pytest.raises(SqlError, match=r"runs forever: env.sql\(query, emit="):
        _env().sql(query)


def test_with_union_all_and_subqueries() -> None:
    got = epochal_rows("WITH big AS (SELECT k, x FROM t WHERE x >= 25), small AS (SELECT k, x FROM t WHERE x < 2) "
                       "SELECT k, x FROM big UNION ALL SELECT k, x * 100 AS x FROM (SELECT * FROM small) s", _rows())
    assert sorted((r["k"], r["x"]) for r in got) == [("a", 25), ("a", 26), ("a", 28), ("a", 29), ("a", 100),
                                                    ("b", 0), ("b", 27)]


def test_explain_prints_the_operators_and_adds_none() -> None:
    env = _env()
    before = len(env._graph.nodes)
    plan = env.explain("EXPLAIN SELECT k, count(*) AS n, min(x) AS m FROM t WHERE x > 3 "
                       "GROUP BY k, window(ts, '10 seconds', '5 seconds')")
    assert len(env._graph.nodes) == before
    assert "view-t-watermarks" in plan and "group-input: MapBatches" in plan
    assert "KeyedWindow count per '__key' over Sliding(size=10.0, slide=5.0" in plan
    assert "KeyedWindow min of '__v0'" in plan and "KeyedProcess" in plan
    assert plan.rstrip().endswith("k: string\nn: int64\nm: int64")


def _uids(env: StreamEnvironment) -> list[str]:
    return [n.spec.uid for n in env._graph.nodes]


def test_uids_are_derived_from_the_query_so_a_restart_restores() -> None:
    one, two = _env(), _env()
    one.sql("SELECT k, count(*) AS n FROM t GROUP BY k, window(ts, '10 seconds')")
    two.sql("select k,  COUNT(*) as n\nfrom t group by k, window(ts, '10 seconds')")
    assert _uids(one) == _uids(two)
    assert all(u.startswith(("sql-", "view-", "source")) for u in _uids(one))
    three = _env()
    three.sql("SELECT k, count(*) AS n FROM t GROUP BY k, window(ts, '20 seconds')")
    assert set(_uids(three)) - set(_uids(one))  # another query, other state


REFUSED = [
    ("SELECT x FROM t ORDER BY x", "ORDER BY", "1:26"),
    ("SELECT x FROM t LIMIT 3", "LIMIT", "1:"),
    ("SELECT DISTINCT x FROM t", "SELECT DISTINCT", "1:"),
    ("SELECT x,\n  rank() OVER (ORDER BY x) AS r FROM t", "OVER", "2:3"),
    ("SELECT soundex(k) AS s FROM t", "function soundex is not supported", "1:8"),
    ("SELECT x FROM nowhere", "no view 'nowhere'", "1:15"),
    ("SELECT nope FROM t", "no column nope", "1:8"),
    ("SELECT count(*) AS n FROM t GROUP BY window(ts, '1 month')", "positive duration", "1:"),
    ("SELECT k, x, count(*) AS n FROM t GROUP BY k, window(ts, '1 minute')", "neither in GROUP BY", "1:11"),
    ("SELECT x FROM t UNION SELECT x FROM t", "UNION ALL is supported", "1:"),
    ("SELECT x FROM t WHERE x IN (SELECT x FROM t)", "subqueries in expressions", "1:36"),
    ("SELECT count(*) AS n FROM t GROUP BY window(x, '1 minute')", "event-time column", "1:"),
    ("SELECT x FROM t WHERE", "syntax error at 1:", ""),
    ("EXPLAIN SELECT x FROM t", "env.explain", "1:1"),
    ("SELECT percentile(x, 0.5) AS p FROM t GROUP BY window(ts, '1 minute')", "PERCENTILE(x, 0.5) at 1:",
     "supported aggregates"),
]


@pytest.mark.parametrize("query,why,position", REFUSED)
def test_what_is_refused_says_why_in_one_line_with_the_position(query: str, why: str, position: str) -> None:
    with pytest.raises(SqlError) as raised:
        _env().sql(query)
    message = str(raised.value)
    assert "\n" not in message and why in message, message
    assert position in message, message  # a position, or more of the reason
    assert re.search(r"\d+:\d+", message), message


def test_a_view_s_batches_are_cast_to_its_schema_and_types_are_checked_before_running() -> None:
    env = StreamEnvironment(parallelism=1, executor="inprocess")
    source = env.from_source(ListSource([{"a": 1, "b": "x"}]))
    env.create_view("v", source, schema=pa.schema([("a", pa.int64()), ("b", pa.string())]))
    with pytest.raises(SqlError, match=r"UPPER\(a\) at 1:8: cannot be computed"):
        env.sql("SELECT upper(a) AS u FROM v")
    with pytest.raises(SqlError, match="event_time 'ts' is not a column"):
        env.create_view("w", source, schema="a BIGINT", event_time="ts")


def _two_views(people: list[dict[str, Any]], orders: list[dict[str, Any]], table_time: bool) -> StreamEnvironment:
    env = StreamEnvironment(parallelism=2, executor="inprocess")
    env.create_view("p", env.from_source(ListSource(people, batch_size=2)),
                    schema="id BIGINT, name STRING, ts TIMESTAMP", event_time="ts" if table_time else None)
    env.create_view("o", env.from_source(ListSource(orders, batch_size=3)),
                    schema="oid BIGINT, person BIGINT, ts TIMESTAMP", event_time="ts")
    return env


def test_a_stream_table_join_joins_each_row_with_the_version_valid_at_its_time() -> None:
    people = [{"id": 1, "name": "ann", "ts": EPOCH}, {"id": 2, "name": "bob", "ts": EPOCH},
              {"id": 1, "name": "ann-2", "ts": EPOCH + dt.timedelta(seconds=10)}]
    orders = [{"oid": 10 + i, "person": 1 + i % 3, "ts": EPOCH + dt.timedelta(seconds=4 * i)} for i in range(6)]
    env = _two_views(people, orders, table_time=True)
    from epochal.testing import CollectSink

    sink = CollectSink()
    query = "SELECT o.oid, p.name FROM o LEFT JOIN p ON o.person = p.id"
    assert "TemporalJoin" in env.explain(query)
    env.sql(query).sink_to(sink)
    env.execute("temporal")
    assert sorted(sink.committed()) == [(10, "ann"), (11, "bob"), (12, None), (13, "ann-2"), (14, "bob"),
                                        (15, None)]


JOIN_REFUSED = [
    ("SELECT o.oid FROM o RIGHT JOIN p ON o.person = p.id", "swap the sides"),
    ("SELECT o.oid FROM o JOIN p ON o.ts > p.ts", "needs equal keys"),
    ("SELECT o.oid FROM o CROSS JOIN p", "needs ON with equal keys"),
    ("SELECT o.oid FROM o JOIN p ON o.person = p.id AND o.ts >= p.ts", "bounded both ways"),
    ("SELECT o.oid FROM o LEFT JOIN p ON o.person = p.id AND o.oid > 3", "only keys and a time bound"),
    ("SELECT count(*) AS n FROM o JOIN p ON o.person = p.id AND o.ts BETWEEN p.ts AND p.ts + INTERVAL 1 SECOND "
     "GROUP BY window(ts, '1 minute')", "event-time column (none)"),
]


@pytest.mark.parametrize("query,why", JOIN_REFUSED)
def test_joins_that_cannot_run_on_streams_are_refused(query: str, why: str) -> None:
    env = _two_views([], [], table_time=True)
    with pytest.raises(SqlError, match=re.escape(why)) as raised:
        env.sql(query)
    assert re.search(r" at \d+:\d+: ", str(raised.value))


def test_a_running_aggregate_skips_nulls_as_spark_does() -> None:
    rows = _rows(12)
    for r in rows:
        if r["k"] == "b":
            r["y"] = None  # every y of key b is NULL: its sum, min, max and avg are NULL
    got = epochal_rows("SELECT k, sum(y) AS s, min(y) AS lo, max(y) AS hi, avg(y) AS a, count(y) AS c "
                       "FROM t GROUP BY k", rows, emit="on_checkpoint")
    last = {r["k"]: r for r in got}
    ys = [r["y"] for r in rows if r["k"] == "a" and r["y"] is not None]
    assert last["a"] == {"k": "a", "s": sum(ys), "lo": min(ys), "hi": max(ys), "a": pytest.approx(sum(ys) / len(ys)),
                         "c": len(ys)}
    assert last["b"] == {"k": "b", "s": None, "lo": None, "hi": None, "a": None, "c": 0}
    with pytest.raises(SqlError, match=r"MIN\(k\) at 1:11: min of string without a window is not supported"):
        _env().sql("SELECT k, min(k) AS m FROM t GROUP BY k", emit="per_record")
