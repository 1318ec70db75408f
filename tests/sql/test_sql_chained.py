"""Aggregates of aggregates (Spark's chained stateful operators): a windowed GROUP BY that keeps
its window's end has that column as its event time, so a GROUP BY on it, a window over it and a
join on it run on the output; the results equal Spark SQL's in batch mode on the same rows. What
cannot be chained (a running aggregate's updates) is refused in one line."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings

from epochal import StreamEnvironment
from epochal.sql import SqlError
from epochal.testing import ListSource

from .grammar import DDL, EPOCH, canonical, chained, rows
from .runner import epochal_rows, spark_rows


@pytest.fixture(scope="module")
def utc_spark(spark: Any) -> Any:
    previous = spark.conf.get("spark.sql.session.timeZone")
    spark.conf.set("spark.sql.session.timeZone", "UTC")
    yield spark
    spark.conf.set("spark.sql.session.timeZone", previous)


@pytest.mark.spark
@settings(max_examples=16, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
@given(data=rows(), query=chained())
def test_an_aggregate_of_a_windowed_aggregate_equals_spark_sql(utc_spark: Any, data: list[dict[str, Any]],
                                                               query: str) -> None:
    expected = canonical(spark_rows(utc_spark, query, data))
    got = canonical(epochal_rows(query, data))
    assert got == expected, query


def _env() -> StreamEnvironment:
    env = StreamEnvironment(parallelism=2, executor="inprocess")
    data = [{"k": "a", "g": 1, "x": 1, "y": 1, "d": 1.0, "ts": EPOCH}]
    env.create_view("t", env.from_source(ListSource(data)), schema=DDL, event_time="ts")
    return env


def test_the_window_end_is_the_event_time_of_a_windowed_aggregate() -> None:
    rows = [{"k": "a", "g": i % 3, "x": i, "y": i, "d": 1.0, "ts": EPOCH.replace(second=i)} for i in range(40)]
    query = ("WITH c AS (SELECT g, count(*) AS n, window.end AS we FROM t GROUP BY g, window(ts, '10 seconds')) "
             "SELECT we, max(n) AS top, count(*) AS groups FROM c GROUP BY we")
    got = sorted((r["we"].second, r["top"], r["groups"]) for r in epochal_rows(query, rows))
    assert got == [(10, 4, 3), (20, 4, 3), (30, 4, 3), (40, 4, 3)]  # per window: 3 groups, the largest of 4
    explained = _env().explain(query)
    assert "window0-max" in explained and "we: timestamp" in explained and "(event time 'we' from here on)" in explained


@pytest.mark.parametrize(("query", "where", "what"), [
    ("SELECT g, sum(n) FROM (SELECT k, g, count(*) AS n FROM t GROUP BY k, g) GROUP BY g", "1:8",
     "an aggregate over a GROUP BY without a window"),
    ("SELECT x.k FROM (SELECT k, count(*) AS n FROM t GROUP BY k) x JOIN t ON x.k = t.k", "1:68",
     "a join of a GROUP BY without a window"),
    ("SELECT count(*) FROM (SELECT window, count(*) AS n FROM t GROUP BY window(ts, '1 second')) "
     "GROUP BY window(window_time(window), '1 minute')", "1:101", "the window's time must be"),
    ("SELECT k, avg(x) OVER (PARTITION BY k ORDER BY ts ROWS BETWEEN 10 PRECEDING AND CURRENT ROW) FROM t",
     "1:11", "OVER (...) window functions are not supported"),
])
def test_what_cannot_be_chained_is_refused_in_one_line(query: str, where: str, what: str) -> None:
    with pytest.raises(SqlError) as error:
        _env().sql(query, emit="per_record")
    message = str(error.value)
    assert "\n" not in message and f" at {where}: " in message and what in message, message


def test_window_time_is_the_end_less_a_microsecond_as_spark_gives_it() -> None:
    """A row of the window [10 s, 20 s) is at 19.999999 s by `window_time(window)`: in the window
    [0 s, 20 s) of a second aggregate, where its end (20 s) is in [20 s, 40 s)."""
    rows = [{"k": "a", "g": 1, "x": i, "y": i, "d": 1.0, "ts": EPOCH.replace(second=i)} for i in range(40)]
    inner = "SELECT count(*) AS n, {} FROM t GROUP BY window(ts, '10 seconds')"
    by_time = (f"WITH c AS ({inner.format('window_time(window) AS wt')}) "
               "SELECT window.end AS e, sum(n) AS n FROM c GROUP BY window(wt, '20 seconds')")
    by_end = (f"WITH c AS ({inner.format('window.end AS we')}) "
              "SELECT window.end AS e, sum(n) AS n FROM c GROUP BY window(we, '20 seconds')")
    seconds = EPOCH.timestamp()
    assert sorted((r["e"].timestamp() - seconds, r["n"]) for r in epochal_rows(by_time, rows)) == [(20, 20), (40, 20)]
    assert sorted((r["e"].timestamp() - seconds, r["n"]) for r in epochal_rows(by_end, rows)) == \
        [(20, 10), (40, 20), (60, 10)]


def test_a_group_by_the_event_time_closes_by_whole_seconds_and_holds_the_watermark_for_its_rows() -> None:
    """Groups of sub-second times close by windows of a second (`timing.TICK`: a millisecond's
    windows kept 60,000 columns live behind a join's minute), and the projection after them holds
    the watermark at the start of the second, so the join on equal times downstream still holds
    every row of `t` when its group's maximum arrives (without the hold it dropped them first)."""
    rows = [{"k": "abc"[i % 3], "g": 1, "x": (i * 7) % 11, "y": 1, "d": 1.0,
             "ts": EPOCH + dt.timedelta(seconds=i // 6, milliseconds=250 * (i % 3))} for i in range(60)]
    query = ("WITH m AS (SELECT ts, max(x) AS top FROM t GROUP BY ts) "
             "SELECT t.k, t.x, t.ts FROM t JOIN m ON t.ts = m.ts AND t.x = m.top")
    top: dict[Any, int] = {}
    for r in rows:
        top[r["ts"]] = max(top.get(r["ts"], r["x"]), r["x"])
    expected = sorted((r["k"], r["x"], r["ts"]) for r in rows if r["x"] == top[r["ts"]])
    got = sorted((r["k"], r["x"], r["ts"].replace(tzinfo=None)) for r in epochal_rows(query, rows))
    assert got == expected and len(expected) >= 20
