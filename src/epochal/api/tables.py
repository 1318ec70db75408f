"""Where `StreamEnvironment.from_table` finds the source of a catalog table.

Reading a table's files is a connector's job, and connectors sit above the API, so the API keeps
a resolver that the `epochal` package registers (it imports the connectors when first used):
the API never imports a connector.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ..errors import EpochalError
from .connector import Source

__all__ = ["TableResolver", "register_table_resolver", "resolve_table"]

TableResolver = Callable[[Any, str, "Sequence[str] | None"], Source[Any]]
_resolver: TableResolver | None = None


def register_table_resolver(resolver: TableResolver) -> None:
    """Make `resolver(spark, table, columns)` the maker of table sources."""
    global _resolver
    _resolver = resolver


def resolve_table(spark: Any, table: str, columns: Sequence[str] | None) -> Source[Any]:
    if _resolver is None:
        raise EpochalError("from_table: no table resolver is registered (import epochal registers it)")
    return _resolver(spark, table, columns)
