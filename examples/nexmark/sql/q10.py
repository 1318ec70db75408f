"""Nexmark q10 in Spark SQL: log to the file system: every bid with its day and minute.

The same query as examples/nexmark/q10.py (the DataStream version), written as the SQL that
Spark's dialect expresses and compiled by `env.sql` to columnar operators over the `bid` view
(`epochal.connectors.nexmark.create_views`). tests/sql/test_nexmark_sql.py checks both versions
and Spark SQL agree on the same events.

    python examples/nexmark/sql/q10.py [--events N] [--parallelism P]
"""

from __future__ import annotations

import os
import sys

from epochal import DataStream
from epochal.connectors.nexmark import create_views

NAME = "sql-q10"
DESCRIPTION = "log to the file system: every bid with its day and minute, as SQL"
SQL = """
SELECT auction, bidder, price, dateTime, extra,
       date_format(dateTime, 'yyyy-MM-dd') AS dt, date_format(dateTime, 'HH:mm') AS hm
FROM bid
"""


def query(events: DataStream) -> DataStream:
    """The Nexmark events with watermarks -> the query's rows, as Arrow batches."""
    env = create_views(events, kinds=("bid",))  # the events' environment, with the views
    return env.sql(SQL)


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    import harness

    harness.main(query, NAME, DESCRIPTION)
