"""Connections to PostgreSQL that wait out a server restart, and the names the connectors share.

A server that stops mid-run (a restart, a fail-over) is waited for, not counted as a failure
of the data: `connect` tries again for `wait` seconds, logging each miss, then fails in one
line that names the server. An attempt that loses its connection mid-transaction fails (its
uncommitted rows went with the connection) and the job restarts from its last checkpoint,
whose new writers wait here for the server to come back.
"""

from __future__ import annotations

import logging
import re
import time
from typing import TYPE_CHECKING, Any

from ...errors import EpochalError

if TYPE_CHECKING:
    import psycopg

log = logging.getLogger(__name__)

_RETRY = 0.5  # seconds between two attempts to reach a server that is down


def psycopg_module() -> Any:
    """psycopg 3, or a one-line error saying how to install it."""
    try:
        import psycopg
    except ImportError as exc:
        raise EpochalError("the PostgreSQL connectors need psycopg 3: pip install 'epochal[postgres]'") from exc
    return psycopg


def server_name(dsn: str) -> str:
    """`host:port/dbname` of a connection string, for messages (never its password)."""
    from psycopg.conninfo import conninfo_to_dict

    try:
        parts = conninfo_to_dict(dsn)
    except Exception:  # noqa: BLE001 - a message, not a parse
        return "<the server>"
    return f"{parts.get('host', 'localhost')}:{parts.get('port', 5432)}/{parts.get('dbname', '')}"


def connect(dsn: str, who: str, *, autocommit: bool, wait: float) -> psycopg.Connection[Any]:
    """A connection, tried again for `wait` seconds while the server cannot be reached."""
    psycopg = psycopg_module()
    deadline = time.monotonic() + wait
    misses = 0
    while True:
        try:
            conn = psycopg.connect(dsn, autocommit=autocommit, connect_timeout=max(2, min(10, int(wait) or 2)))
            if misses:
                log.warning("%s: reached %s again after %d failed attempt(s)", who, server_name(dsn), misses)
            return conn
        except psycopg.OperationalError as exc:
            misses += 1
            if time.monotonic() >= deadline:
                raise EpochalError(f"{who}: cannot reach the PostgreSQL server {server_name(dsn)} "
                                   f"(tried for {wait:g} s): {_first_line(exc)}") from exc
            if misses == 1:
                log.warning("%s: the server %s cannot be reached (%s); trying again for %g s",
                            who, server_name(dsn), _first_line(exc), wait)
            time.sleep(_RETRY)


def is_disconnect(exc: BaseException) -> bool:
    """Whether `exc` says the connection to the server is gone (not that a statement failed)."""
    psycopg = psycopg_module()
    return isinstance(exc, psycopg.OperationalError) and not isinstance(exc, psycopg.errors.QueryCanceled)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_$]*")


def quote_name(name: str) -> str:
    """A table name (`t` or `schema.t`), each part quoted as an identifier."""
    parts = name.split(".")
    if not 1 <= len(parts) <= 2 or not all(parts):
        raise ValueError(f"table must be 'name' or 'schema.name', got {name!r}")
    return ".".join('"' + p.replace('"', '""') + '"' for p in parts)


def split_name(name: str) -> tuple[str, str]:
    """(schema, table) of `t` (schema `public`) or `schema.t`."""
    quote_name(name)
    schema, _, table = name.rpartition(".")
    return schema or "public", table


def first_line(exc: BaseException) -> str:
    """An exception's first line: the server's message without its detail lines."""
    return _first_line(exc)
