"""Nexmark q3 in Spark SQL: local item suggestion (auctions of category 10 by sellers in OR, ID, CA).

The same query as examples/nexmark/q3.py (the DataStream version), written as the SQL that
Spark's dialect expresses and compiled by `env.sql` to columnar operators over the `auction` and `person` views
(`epochal.connectors.nexmark.create_views`). tests/sql/test_nexmark_sql.py checks both versions
and Spark SQL agree on the same events.

    python examples/nexmark/sql/q3.py [--events N] [--parallelism P]
"""

from __future__ import annotations

import os
import sys

from epochal import DataStream
from epochal.connectors.nexmark import create_views

NAME = "sql-q3"
DESCRIPTION = "local item suggestion: auctions of category 10 by sellers in OR, ID or CA, as SQL"
# An interval join, as the DataStream version holds its sides: a person is kept for good (here: a
# day of event time, longer than any run), an auction waits 10 s of event time for its seller.
SQL = """
SELECT p.name, p.city, p.state, a.id
FROM (SELECT id, seller, dateTime FROM auction WHERE category = 10) a
JOIN (SELECT id, name, city, state, dateTime FROM person WHERE state IN ('OR', 'ID', 'CA')) p
  ON a.seller = p.id
 AND p.dateTime BETWEEN a.dateTime - INTERVAL 1 DAY AND a.dateTime + INTERVAL 10 SECONDS
"""


def query(events: DataStream) -> DataStream:
    """The Nexmark events with watermarks -> the query's rows, as Arrow batches."""
    env = create_views(events, kinds=("auction", "person"))  # the events' environment, with the views
    return env.sql(SQL)


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    import harness

    harness.main(query, NAME, DESCRIPTION)
