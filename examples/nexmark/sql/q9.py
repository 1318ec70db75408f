"""Nexmark q9 in Spark SQL: winning bids: each auction with its highest bid within its lifetime.

The same query as examples/nexmark/q9.py (the DataStream version), written as the SQL that
Spark's dialect expresses and compiled by `env.sql` to columnar operators over the `auction` and `bid` views
(`epochal.connectors.nexmark.create_views`). tests/sql/test_nexmark_sql.py checks both versions
and Spark SQL agree on the same events.

The Nexmark project writes q9 with `ROW_NUMBER() OVER (PARTITION BY a.id ORDER BY b.price DESC,
b.dateTime ASC) <= 1`, which Spark SS refuses on streams (and Epochal's SQL with it); the same
winner comes out of aggregates of aggregates: `pairs` is q4's join (an auction's bids within its
lifetime, with the auction's `dateTime` as event time), `best` the highest price per auction,
`earliest` the first time that price was bid, and the last step the lowest bidder of that price
at that time. Each step groups by the auction's `dateTime`, so a group closes when the watermark
passes it, and each join meets rows of the same auction on equal `dateTime` (bounds [0, 0]).
One row per auction with a bid in its lifetime, once, when it is complete.

    python examples/nexmark/sql/q9.py [--events N] [--parallelism P]
"""

from __future__ import annotations

import os
import sys

from epochal import DataStream
from epochal.connectors.nexmark import create_views

NAME = "sql-q9"
DESCRIPTION = "winning bids: each auction with its highest bid within its lifetime, as SQL"
SQL = """
WITH pairs AS (
  SELECT a.id, a.seller, a.category, a.expires, a.dateTime, b.bidder, b.price, b.dateTime AS bidtime
  FROM auction a JOIN bid b
    ON a.id = b.auction
   AND b.dateTime BETWEEN a.dateTime AND a.dateTime + INTERVAL 1 MINUTE
   AND b.dateTime <= a.expires
),
best AS (SELECT id, dateTime, max(price) AS price FROM pairs GROUP BY id, dateTime),
earliest AS (
  SELECT p.id, p.dateTime, p.price, min(p.bidtime) AS bidtime
  FROM pairs p JOIN best t ON p.id = t.id AND p.dateTime = t.dateTime AND p.price = t.price
  GROUP BY p.id, p.dateTime, p.price
)
SELECT p.id AS auction, p.seller, p.category, p.expires, min(p.bidder) AS bidder, p.price, p.bidtime
FROM pairs p JOIN earliest e
  ON p.id = e.id AND p.dateTime = e.dateTime AND p.price = e.price AND p.bidtime = e.bidtime
GROUP BY p.id, p.dateTime, p.seller, p.category, p.expires, p.price, p.bidtime
"""


def query(events: DataStream) -> DataStream:
    """The Nexmark events with watermarks -> the query's rows, as Arrow batches."""
    env = create_views(events, kinds=("auction", "bid"))  # the events' environment, with the views
    return env.sql(SQL)


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    import harness

    harness.main(query, NAME, DESCRIPTION)
