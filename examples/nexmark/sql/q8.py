"""Nexmark q8 in Spark SQL: new users: persons who created an auction in the tumbling 10 s window they registered in.

The same query as examples/nexmark/q8.py (the DataStream version), written as the SQL that
Spark's dialect expresses and compiled by `env.sql` to columnar operators over the `auction` and `person` views
(`epochal.connectors.nexmark.create_views`). tests/sql/test_nexmark_sql.py checks both versions
and Spark SQL agree on the same events.

Two windowed aggregates joined on their windows: each keeps its window's end (`endtime`) as its
event time, and the join on equal ends (with `p.id = a.seller`) is an interval join with bounds
[0, 0]: a person and a seller of the same window meet once both windows closed.

    python examples/nexmark/sql/q8.py [--events N] [--parallelism P]
"""

from __future__ import annotations

import os
import sys

from epochal import DataStream
from epochal.connectors.nexmark import create_views

NAME = "sql-q8"
DESCRIPTION = "new users: persons with an auction in the 10 s tumbling window they registered in, as SQL"
SQL = """
WITH p AS (
  SELECT id, name, window.start AS starttime, window.end AS endtime
  FROM person GROUP BY id, name, window(dateTime, '10 seconds')
),
a AS (SELECT seller, window.end AS endtime FROM auction GROUP BY seller, window(dateTime, '10 seconds'))
SELECT p.id, p.name, p.starttime
FROM p JOIN a ON p.id = a.seller AND p.endtime = a.endtime
"""


def query(events: DataStream) -> DataStream:
    """The Nexmark events with watermarks -> the query's rows, as Arrow batches."""
    env = create_views(events, kinds=("auction", "person"))  # the events' environment, with the views
    return env.sql(SQL)


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    import harness

    harness.main(query, NAME, DESCRIPTION)
