"""PostgreSQL: a sink that commits each checkpoint's rows in one prepared transaction, and a
change-data-capture source over a logical replication slot (pgoutput)."""

from .sink import PostgresSink as PostgresSink

__all__ = ["PostgresSink"]
