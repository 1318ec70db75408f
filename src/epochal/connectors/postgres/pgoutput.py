"""pgoutput's binary messages (PostgreSQL's logical replication protocol, version 1), parsed.

Pure functions over bytes: the CDC source reads them from a replication slot through the SQL
interface (`pg_logical_slot_get_binary_changes(..., 'proto_version', '1', 'publication_names',
...)`), one message per row. The layouts are those of PostgreSQL's "Logical Replication Message
Formats": Begin, Commit, Relation, Insert, Update, Delete, Truncate; Origin and Type messages
carry nothing a changelog needs and are passed over.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

# A column's value in a tuple: its text (UTF-8 bytes), None for NULL, or UNCHANGED for a
# TOASTed value an update did not change (pgoutput does not send it).
UNCHANGED = object()


@dataclass(frozen=True, slots=True)
class Begin:
    final_lsn: int  # the LSN of the transaction's commit record
    commit_time: int  # microseconds since 2000-01-01 UTC
    xid: int


@dataclass(frozen=True, slots=True)
class Commit:
    commit_lsn: int
    end_lsn: int  # just past the commit record: where a slot advanced past this transaction stands
    commit_time: int


@dataclass(frozen=True, slots=True)
class Column:
    name: str
    type_oid: int
    is_key: bool


@dataclass(frozen=True, slots=True)
class Relation:
    oid: int
    namespace: str
    name: str
    replica_identity: str  # d(efault), n(othing), f(ull), i(ndex)
    columns: tuple[Column, ...]

    @property
    def qualified(self) -> str:
        return f"{self.namespace}.{self.name}"


@dataclass(frozen=True, slots=True)
class Change:
    """An insert, update or delete of one row: `new` for inserts and updates; `old` for deletes
    (the key, or the whole row with REPLICA IDENTITY FULL) and for updates that changed the key."""

    op: str  # "insert" | "update" | "delete"
    relation: int
    new: tuple[object, ...] | None
    old: tuple[object, ...] | None


@dataclass(frozen=True, slots=True)
class Truncate:
    relations: tuple[int, ...]


Message = Begin | Commit | Relation | Change | Truncate | None

_Q = struct.Struct(">q")
_I = struct.Struct(">i")
_H = struct.Struct(">h")


def parse(data: bytes) -> Message:
    """One message; None for the kinds a changelog has no use for (Origin, Type, Message)."""
    kind = data[:1]
    if kind == b"B":
        final, time, xid = struct.unpack_from(">qqi", data, 1)
        return Begin(final, time, xid)
    if kind == b"C":
        commit, end, time = struct.unpack_from(">qqq", data, 2)
        return Commit(commit, end, time)
    if kind == b"R":
        return _relation(data)
    if kind == b"I":
        (oid,) = _I.unpack_from(data, 1)
        new, _ = _tuple(data, 6)  # after 'N'
        return Change("insert", oid, new, None)
    if kind == b"U":
        (oid,) = _I.unpack_from(data, 1)
        pos, old = 5, None
        if data[pos : pos + 1] in (b"K", b"O"):
            old, pos = _tuple(data, pos + 1)
        new, _ = _tuple(data, pos + 1)  # after 'N'
        return Change("update", oid, new, old)
    if kind == b"D":
        (oid,) = _I.unpack_from(data, 1)
        old, _ = _tuple(data, 6)  # after 'K' or 'O'
        return Change("delete", oid, None, old)
    if kind == b"T":
        (count,) = _I.unpack_from(data, 1)
        return Truncate(tuple(struct.unpack_from(f">{count}i", data, 6)))
    return None


def _string(data: bytes, pos: int) -> tuple[str, int]:
    end = data.index(b"\x00", pos)
    return data[pos:end].decode("utf-8"), end + 1


def _relation(data: bytes) -> Relation:
    (oid,) = _I.unpack_from(data, 1)
    namespace, pos = _string(data, 5)
    name, pos = _string(data, pos)
    identity = chr(data[pos])
    (count,) = _H.unpack_from(data, pos + 1)
    pos += 3
    columns = []
    for _ in range(count):
        flags = data[pos]
        column, pos = _string(data, pos + 1)
        (type_oid,) = _I.unpack_from(data, pos)
        pos += 8  # type oid, type modifier
        columns.append(Column(column, type_oid, bool(flags & 1)))
    return Relation(oid, namespace or "pg_catalog", name, identity, tuple(columns))


def _tuple(data: bytes, pos: int) -> tuple[tuple[object, ...], int]:
    """The values of a TupleData at `pos`, each its text's UTF-8 bytes (decoded in bulk by the
    changelog's Arrow conversion), None or UNCHANGED; and the position after it."""
    count = (data[pos] << 8) | data[pos + 1]
    pos += 2
    values: list[object] = []
    append, unpack = values.append, _I.unpack_from
    for _ in range(count):
        kind = data[pos]
        pos += 1
        if kind == 116:  # 't' (text); b (binary) is only sent when asked for, which we never do
            (size,) = unpack(data, pos)
            pos += 4
            append(data[pos : pos + size])
            pos += size
        elif kind == 110:  # 'n'
            append(None)
        else:  # 'u': a TOASTed value the update did not change
            append(UNCHANGED)
    return tuple(values), pos


tuple_at = _tuple  # the insert's fast path in the CDC reader
unpack_int = _I.unpack_from


def format_lsn(lsn: int) -> str:
    """`0/16B3748`, as PostgreSQL writes an LSN."""
    return f"{lsn >> 32:X}/{lsn & 0xFFFFFFFF:X}"


def parse_lsn(text: str) -> int:
    high, _, low = text.partition("/")
    return (int(high, 16) << 32) | int(low, 16)
