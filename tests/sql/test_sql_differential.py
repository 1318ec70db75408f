"""Differential: random queries from a grammar (`grammar`), run by Epochal on a bounded stream and
by Spark SQL in batch mode on the same rows; the final results are equal (a window's row is final
once the watermark passes its end; the end of the input passes every end)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings

from .grammar import canonical, queries, rows
from .runner import epochal_rows, spark_rows

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def utc_spark(spark: Any) -> Any:
    previous = spark.conf.get("spark.sql.session.timeZone")
    spark.conf.set("spark.sql.session.timeZone", "UTC")
    yield spark
    spark.conf.set("spark.sql.session.timeZone", previous)


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
@given(data=rows(), other=rows(), query=queries())
def test_epochal_equals_spark_sql_on_the_same_rows(utc_spark: Any, data: list[dict[str, Any]],
                                                   other: list[dict[str, Any]], query: str) -> None:
    expected = canonical(spark_rows(utc_spark, query, data, other))
    got = canonical(epochal_rows(query, data, other=other))
    assert got == expected, query
