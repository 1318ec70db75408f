"""Nexmark q5 in Spark SQL: hot items: the auctions with the most bids per 10 s window sliding by 2 s.

The same query as examples/nexmark/q5.py (the DataStream version), written as the SQL that
Spark's dialect expresses and compiled by `env.sql` to columnar operators over the `bid` view
(`epochal.connectors.nexmark.create_views`). tests/sql/test_nexmark_sql.py checks both versions
and Spark SQL agree on the same events.

An aggregate over a windowed aggregate's output: `counts` keeps its window's end (`endtime`),
which is its event time from there on (docs/sql.md, "Aggregates of aggregates"), so `maxes`
groups by it (a group closes when the watermark passes that time) and the join meets each
window's counts with its maximum on equal ends (an interval join with bounds [0, 0]).

    python examples/nexmark/sql/q5.py [--events N] [--parallelism P]
"""

from __future__ import annotations

import os
import sys

from epochal import DataStream
from epochal.connectors.nexmark import create_views

NAME = "sql-q5"
DESCRIPTION = "hot items: the auctions with the most bids per 10 s window sliding by 2 s, as SQL"
SQL = """
WITH counts AS (
  SELECT auction, count(*) AS num, window.start AS starttime, window.end AS endtime
  FROM bid GROUP BY auction, window(dateTime, '10 seconds', '2 seconds')
),
maxes AS (SELECT max(num) AS maxn, endtime FROM counts GROUP BY endtime)
SELECT c.auction, c.num, c.starttime AS window_start, c.endtime AS window_end
FROM counts c JOIN maxes m ON c.num = m.maxn AND c.endtime = m.endtime
"""


def query(events: DataStream) -> DataStream:
    """The Nexmark events with watermarks -> the query's rows, as Arrow batches."""
    env = create_views(events, kinds=("bid",))  # the events' environment, with the views
    return env.sql(SQL)


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    import harness

    harness.main(query, NAME, DESCRIPTION)
