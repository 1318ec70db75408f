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


@dataclass(slots=True)
class Rows:
    """Changes as they go out, one table's: per row its op and values (UTF-8 bytes, None,
    UNCHANGED; None for a truncate), and its transaction's end LSN and commit time."""

    ops: list[str]
    values: list[tuple[object, ...] | None]
    lsns: list[int]
    times: list[int]

    def __len__(self) -> int:
        return len(self.ops)

    def without(self, i: int) -> Rows:
        def drop(items: list[Any]) -> list[Any]:
            return items[:i] + items[i + 1 :]

        return Rows(drop(self.ops), drop(self.values), drop(self.lsns), drop(self.times))


class BadValue(ValueError):
    """A value that does not convert to its column's type."""

    def __init__(self, row: int, column: str, value: object, why: str) -> None:
        super().__init__(f"column {column!r}: {value!r} is not a {why}")
        self.row = row


def to_batch(relation: Relation, rows: Rows) -> pa.RecordBatch:
    """The rows (all of `relation`) as one batch; raises `BadValue` naming the first bad row."""
    schema = schema_of(relation)
    n = len(rows)
    times = pa.array(rows.times, pa.int64())
    arrays: list[pa.Array] = [
        pa.array(rows.ops, pa.string()),
        pa.array([relation.qualified] * n, pa.string()),
        pa.array(rows.lsns, pa.int64()),
        pc.add(times, POSTGRES_EPOCH_US).cast(pa.timestamp("us", tz="UTC")),
    ]
    width = len(relation.columns)
    whole = all(v is not None and len(v) == width for v in rows.values)
    columns = list(zip(*rows.values)) if whole and n else None
    for i, column in enumerate(relation.columns):
        raw = list(columns[i]) if columns is not None else [_value(v, i) for v in rows.values]
        arrays.append(_convert(raw, schema.field(4 + i).type, column.name))
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def _value(values: tuple[object, ...] | None, i: int) -> bytes | None:
    if values is None or i >= len(values):
        return None
    value = values[i]
    return None if value is UNCHANGED else value  # type: ignore[return-value]


def _convert(raw: list[Any], kind: pa.DataType, column: str) -> pa.Array:
    try:
        binary = pa.array(raw, pa.binary())
    except (pa.ArrowInvalid, pa.ArrowTypeError):  # an UNCHANGED value among them: it is null
        raw = [None if v is UNCHANGED else v for v in raw]
        binary = pa.array(raw, pa.binary())
    try:
        return _cast(binary.cast(pa.string()), kind)  # UTF-8 checked in bulk
    except (pa.ArrowInvalid, ValueError):
        for row, value in enumerate(raw):  # find the value, for the message
            try:
                _cast(pa.array([value], pa.binary()).cast(pa.string()), kind)
            except (pa.ArrowInvalid, ValueError) as exc:
                raise BadValue(row, column, _text(value), str(kind)) from exc
        raise


def _cast(strings: pa.Array, kind: pa.DataType) -> pa.Array:
    if kind == pa.string():
        return strings
    if kind == pa.bool_():
        return pc.equal(strings, "t")
    if kind == pa.binary():
        return pa.array([None if t is None else bytes.fromhex(t[2:]) for t in strings.to_pylist()], pa.binary())
    if pa.types.is_floating(kind):
        strings = pc.replace_substring_regex(strings, "^(-?)Infinity$", r"\1inf")
    if pa.types.is_timestamp(kind) and kind.tz is not None:  # the reader's session is in UTC: '+00'
        strings = pc.replace_substring_regex(strings, r"\+00$", "")
        return strings.cast(pa.timestamp("us")).cast(kind)
    return strings.cast(kind)


def _text(value: object) -> str | None:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return None if value is None or value is UNCHANGED else str(value)


def values_of(relation: Relation, rows: Rows, i: int) -> dict[str, Any]:
    """Row `i` as a dict of its text values, for messages and dead letters."""
    out: dict[str, Any] = {"op": rows.ops[i], "table": relation.qualified, "lsn": rows.lsns[i]}
    for j, column in enumerate(relation.columns):
        out[column.name] = _text(_value(rows.values[i], j))
    return out
