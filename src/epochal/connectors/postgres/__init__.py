"""PostgreSQL: a sink that commits each checkpoint's rows in one prepared transaction, and a
change-data-capture source over a logical replication slot (pgoutput)."""

from .cdc import PostgresCdcSource as PostgresCdcSource
from .sink import PostgresSink as PostgresSink

__all__ = ["PostgresCdcSource", "PostgresSink"]
