"""Nexmark q7 in Spark SQL: highest bid: the bids with the top price of each tumbling 10 s window.

The same query as examples/nexmark/q7.py (the DataStream version), written as the SQL that
Spark's dialect expresses and compiled by `env.sql` to columnar operators over the `bid` view
(`epochal.connectors.nexmark.create_views`). tests/sql/test_nexmark_sql.py checks both versions
and Spark SQL agree on the same events.

The maximum price per window keeps its window's end (`window.end AS dateTime`) as its event
time; the join meets each bid with its window's maximum: the bid's time is in the window
(`[end - 10 s, end)`, i.e. `[start, end)`) and its price is the maximum, an interval join.

    python examples/nexmark/sql/q7.py [--events N] [--parallelism P]
"""

from __future__ import annotations

import os
import sys

from epochal import DataStream
from epochal.connectors.nexmark import create_views

NAME = "sql-q7"
DESCRIPTION = "highest bid: the bids with the top price of each tumbling 10 s window, as SQL"
SQL = """
WITH maxes AS (
  SELECT max(price) AS maxprice, window.end AS dateTime
  FROM bid GROUP BY window(dateTime, '10 seconds')
)
SELECT b.auction, b.bidder, b.price, b.dateTime, b.extra
FROM bid b JOIN maxes m
  ON b.price = m.maxprice
 AND b.dateTime >= m.dateTime - INTERVAL 10 SECONDS AND b.dateTime < m.dateTime
"""


def query(events: DataStream) -> DataStream:
    """The Nexmark events with watermarks -> the query's rows, as Arrow batches."""
    env = create_views(events, kinds=("bid",))  # the events' environment, with the views
    return env.sql(SQL)


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    import harness

    harness.main(query, NAME, DESCRIPTION)
