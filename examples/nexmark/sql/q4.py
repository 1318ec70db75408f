"""Nexmark q4 in Spark SQL: average closing price per category.

The same query as examples/nexmark/q4.py (the DataStream version), written as the SQL that
Spark's dialect expresses and compiled by `env.sql` to columnar operators over the `auction` and `bid` views
(`epochal.connectors.nexmark.create_views`). tests/sql/test_nexmark_sql.py checks both versions
and Spark SQL agree on the same events.

Each auction joins its bids within its lifetime (an interval join: a bid from the auction's start
to a minute after, longer than any auction of the generator lives at 200 events/s or more, and
at most `expires`: a filter of the pairs); the join's output keeps the auction's `dateTime` as its
event time, the join holding its watermark back by the minute, so `winners` groups by it: an
auction's maximum goes out once the watermark passes its start, when every pair of it is in.
The average per category is a running aggregate over the closed auctions (`emit="per_record"`:
Spark SS refuses an aggregate without a window after another one; its batch answer is the
last row per category).

    python examples/nexmark/sql/q4.py [--events N] [--parallelism P]
"""

from __future__ import annotations

import os
import sys

from epochal import DataStream
from epochal.connectors.nexmark import create_views

NAME = "sql-q4"
DESCRIPTION = "average closing price per category (auctions joined with their bids), as SQL"
SQL = """
WITH winners AS (
  SELECT a.id, a.category, a.dateTime, max(b.price) AS final
  FROM auction a JOIN bid b
    ON a.id = b.auction
   AND b.dateTime BETWEEN a.dateTime AND a.dateTime + INTERVAL 1 MINUTE
   AND b.dateTime <= a.expires
  GROUP BY a.id, a.category, a.dateTime
)
SELECT category, avg(final) AS average, count(*) AS auctions FROM winners GROUP BY category
"""


def query(events: DataStream) -> DataStream:
    """The Nexmark events with watermarks -> the query's rows, as Arrow batches."""
    env = create_views(events, kinds=("auction", "bid"))  # the events' environment, with the views
    return env.sql(SQL, emit="per_record")


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    import harness

    harness.main(query, NAME, DESCRIPTION)
