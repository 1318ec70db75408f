"""What the SQL layer refuses, in one line: the construct, where it is in the query, and why.

Positions come from sqlglot's tokens (`meta` of the identifiers and functions under a node): the
earliest one under the refused construct, as `line:column` of the query text.
"""

from __future__ import annotations

import re
from typing import Any

from ..errors import GraphError

__all__ = ["SqlError", "refuse", "position_of", "parse_duration"]


class SqlError(GraphError):
    """A query Epochal's SQL cannot run (a syntax error, a construct not supported on streams, an
    unknown view or column); raised by `env.sql` before anything runs."""


def position_of(node: Any, query: str) -> str:
    """`line:column` (1-based) of the first token under `node` in `query`, or `?` if unknown."""
    starts = [n.meta["start"] for n in node.walk() if isinstance(getattr(n, "meta", None), dict)
              and "start" in n.meta] if node is not None else []
    if not starts:
        return "?"
    start = min(starts)
    line = query.count("\n", 0, start) + 1
    column = start - (query.rfind("\n", 0, start) + 1) + 1
    return f"{line}:{column}"


def construct(node: Any) -> str:
    """A short name of a construct for messages: its SQL text, cut to 60 characters."""
    try:
        text = str(node.sql(dialect="spark"))
    except Exception:  # noqa: BLE001 - a message, not a result
        text = type(node).__name__
    return text if len(text) <= 60 else text[:57] + "..."


def refuse(node: Any, query: str, why: str) -> SqlError:
    """The error for a refused construct: `SQL: <construct> at <line:col>: <why>`."""
    return SqlError(f"SQL: {construct(node)} at {position_of(node, query)}: {why}")


_UNITS = {
    "millisecond": 0.001, "milliseconds": 0.001, "ms": 0.001,
    "second": 1.0, "seconds": 1.0, "sec": 1.0, "secs": 1.0, "s": 1.0,
    "minute": 60.0, "minutes": 60.0, "min": 60.0, "mins": 60.0,
    "hour": 3600.0, "hours": 3600.0, "day": 86400.0, "days": 86400.0,
    "week": 604800.0, "weeks": 604800.0,
}
_DURATION = re.compile(r"^\s*(?:interval\s+)?'?\s*(\d+(?:\.\d+)?)\s*'?\s*([a-z]+)\s*$", re.IGNORECASE)


def parse_duration(text: str) -> float | None:
    """Seconds of a Spark interval string (`'10 seconds'`, `'1 minute'`, `INTERVAL 5 SECONDS`),
    or None when it is not one (months and years have no fixed length: refused by the caller)."""
    found = _DURATION.match(text)
    if not found or found.group(2).lower() not in _UNITS:
        return None
    return float(found.group(1)) * _UNITS[found.group(2).lower()]
