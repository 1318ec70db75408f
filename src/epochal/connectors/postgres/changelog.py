"""Decoded changes to Arrow: one batch per run of rows of one table, with an `op` column.

Every batch has `op` ("insert", "update", "delete", "truncate"), `table` (`schema.name`), `lsn`
(where the change's transaction ends, the position a slot advances to) and `commit_time`, then
the table's columns, typed from their PostgreSQL types: booleans, integers, floats, dates and
timestamps become Arrow's; numeric stays text (exact); bytea becomes binary; everything else
(text, json, uuid, arrays, ...) is text, as the server writes it. A delete carries the key
columns only (or the whole row, with REPLICA IDENTITY FULL); a TOASTed value an update left
unchanged is not sent by the server, and is null.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from .pgoutput import UNCHANGED, Relation

POSTGRES_EPOCH_US = 946_684_800_000_000  # 2000-01-01 in microseconds since 1970-01-01

_INTS = {20: pa.int64(), 21: pa.int16(), 23: pa.int32(), 26: pa.int64()}
_FLOATS = {700: pa.float32(), 701: pa.float64()}
_BOOL, _DATE, _TIMESTAMP, _TIMESTAMPTZ, _BYTEA = 16, 1082, 1114, 1184, 17


def arrow_type(type_oid: int) -> pa.DataType:
    """The Arrow type of a column of PostgreSQL type `type_oid`."""
    if type_oid in _INTS:
        return _INTS[type_oid]
    if type_oid in _FLOATS:
        return _FLOATS[type_oid]
    return {
        _BOOL: pa.bool_(), _DATE: pa.date32(), _TIMESTAMP: pa.timestamp("us"),
        _TIMESTAMPTZ: pa.timestamp("us", tz="UTC"), _BYTEA: pa.binary(),
    }.get(type_oid, pa.string())


def schema_of(relation: Relation) -> pa.Schema:
    fields = [pa.field("op", pa.string()), pa.field("table", pa.string()), pa.field("lsn", pa.int64()),
              pa.field("commit_time", pa.timestamp("us", tz="UTC"))]
    return pa.schema(fields + [pa.field(c.name, arrow_type(c.type_oid)) for c in relation.columns])


@dataclass(frozen=True, slots=True)
class Row:
    """One change as it goes out: its op, the row's values (text), and its transaction's end."""

    relation: int
    op: str
    values: tuple[object, ...] | None  # None: a truncate
    lsn: int
    commit_time: int


class BadValue(ValueError):
    """A value that does not convert to its column's type."""

    def __init__(self, row: int, column: str, value: object, why: str) -> None:
        super().__init__(f"column {column!r}: {value!r} is not a {why}")
        self.row = row


def to_batch(relation: Relation, rows: Sequence[Row]) -> pa.RecordBatch:
    """The rows (all of `relation`) as one batch; raises `BadValue` naming the first bad row."""
    schema = schema_of(relation)
    n = len(rows)
    arrays: list[pa.Array] = [
        pa.array([r.op for r in rows], pa.string()),
        pa.array([relation.qualified] * n, pa.string()),
        pa.array([r.lsn for r in rows], pa.int64()),
        pa.array([r.commit_time + POSTGRES_EPOCH_US for r in rows], pa.int64()).cast(pa.timestamp("us", tz="UTC")),
    ]
    for i, column in enumerate(relation.columns):
        texts = [_text(r.values, i) for r in rows]
        arrays.append(_convert(texts, schema.field(4 + i).type, column.name))
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def _text(values: tuple[object, ...] | None, i: int) -> str | None:
    if values is None or i >= len(values):
        return None
    value = values[i]
    return None if value is UNCHANGED else value  # type: ignore[return-value]


def _convert(texts: list[str | None], kind: pa.DataType, column: str) -> pa.Array:
    if kind == pa.string():
        return pa.array(texts, pa.string())
    try:
        return _cast(texts, kind)
    except (pa.ArrowInvalid, ValueError):
        for row, text in enumerate(texts):  # find the value, for the message
            try:
                _cast([text], kind)
            except (pa.ArrowInvalid, ValueError) as exc:
                raise BadValue(row, column, text, str(kind)) from exc
        raise


def _cast(texts: list[str | None], kind: pa.DataType) -> pa.Array:
    if kind == pa.bool_():
        return pa.array([None if t is None else t == "t" for t in texts], pa.bool_())
    if kind == pa.binary():
        return pa.array([None if t is None else bytes.fromhex(t[2:]) for t in texts], pa.binary())
    strings = pa.array(texts, pa.string())
    if pa.types.is_floating(kind):
        strings = pc.replace_substring_regex(strings, "^(-?)Infinity$", r"\1inf")
    if pa.types.is_timestamp(kind) and kind.tz is not None:  # the reader's session is in UTC: '+00'
        strings = pc.replace_substring_regex(strings, r"\+00$", "")
        return strings.cast(pa.timestamp("us")).cast(kind)
    return strings.cast(kind)


def values_of(relation: Relation, row: Row) -> dict[str, Any]:
    """A row as a dict of its text values, for messages and dead letters."""
    out: dict[str, Any] = {"op": row.op, "table": relation.qualified, "lsn": row.lsn}
    for i, column in enumerate(relation.columns):
        out[column.name] = _text(row.values, i)
    return out
