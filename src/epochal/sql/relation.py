"""A relation of a query being planned: a stream of Arrow batches, its schema, and the column
its watermarks follow (what every planning step, `planner`, `grouping`, `joins`, `finals`,
takes and gives)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import pyarrow as pa

from .expressions import Scope

if TYPE_CHECKING:
    from ..api.stream import DataStream


@dataclass(slots=True)
class Relation:
    """A stream of Arrow batches with `schema`; `event_time` names the column the stream's
    watermarks follow (None once it is gone); `conform`: batches still to be cast to it (a view)."""

    stream: DataStream
    schema: pa.Schema
    event_time: str | None
    qualifiers: tuple[str, ...]
    conform: pa.Schema | None = None
    columns: dict[tuple[str | None, str], str] | None = None  # a join's: qualified names of both sides
    updates: bool = False  # a running aggregate's rows: each a key's new result, replacing its last one

    def scope(self, query: str) -> Scope:
        if self.columns is not None:
            return Scope(dict(self.columns), query)
        return Scope.of(list(self.schema.names), query, self.qualifiers)
