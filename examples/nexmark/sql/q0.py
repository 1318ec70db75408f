"""Nexmark q0 in Spark SQL: passthrough: every bid.

The same query as examples/nexmark/q0.py (the DataStream version), written as the SQL that
Spark's dialect expresses and compiled by `env.sql` to columnar operators over the `bid` view
(`epochal.connectors.nexmark.create_views`). tests/sql/test_nexmark_sql.py checks both versions
and Spark SQL agree on the same events.

    python examples/nexmark/sql/q0.py [--events N] [--parallelism P]
"""

from __future__ import annotations

import os
import sys

from epochal import DataStream
from epochal.connectors.nexmark import create_views

NAME = "sql-q0"
DESCRIPTION = "passthrough: every bid, as SQL"
SQL = """SELECT auction, bidder, price, dateTime, extra FROM bid"""


def query(events: DataStream) -> DataStream:
    """The Nexmark events with watermarks -> the query's rows, as Arrow batches."""
    env = create_views(events, kinds=("bid",))  # the events' environment, with the views
    return env.sql(SQL)


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    import harness

    harness.main(query, NAME, DESCRIPTION)
