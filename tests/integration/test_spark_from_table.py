"""env.from_table: a Spark catalog table (Parquet, Hive-style partitions) read through its files
by a job on Spark gives the totals Spark's own query gives."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from epochal import StreamEnvironment
from epochal.errors import EpochalError
from epochal.testing import CollectSink

pytestmark = pytest.mark.spark


def test_a_partitioned_parquet_table_sums_as_spark_sums_it(spark: Any, tmp_path: Path) -> None:
    spark.sql(f"CREATE DATABASE IF NOT EXISTS epochal_t LOCATION '{tmp_path / 'db'}'")
    try:
        (spark.range(3000).selectExpr("id", "id % 7 AS amount", "CAST(id % 3 AS STRING) AS region")
            .repartition(4).write.partitionBy("region").format("parquet").saveAsTable("epochal_t.events"))
        expected = {r.region: r.total for r in spark.sql(
            "SELECT region, SUM(amount) AS total FROM epochal_t.events GROUP BY region").collect()}

        env = StreamEnvironment(parallelism=2, executor="inprocess")
        sink = CollectSink()
        rows = env.from_table(spark, "epochal_t.events", columns=["amount", "region"])
        rows.key_by(lambda r: r[1]).reduce(lambda a, b: (a[0] + b[0], a[1])).sink_to(sink)
        env.execute("from-table")
        totals: dict[str, int] = {}
        for amount, region in sink.committed():
            totals[region] = max(totals.get(region, 0), amount)
        assert totals == expected

        spark.sql("CREATE OR REPLACE TEMPORARY VIEW epochal_v AS SELECT 1 AS x")
        with pytest.raises(EpochalError, match="has no location"):
            env.from_table(spark, "epochal_v")
    finally:
        spark.sql("DROP DATABASE IF EXISTS epochal_t CASCADE")
