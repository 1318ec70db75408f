"""How a message's bytes become a row, and a row a message: JSON, Avro, or the raw bytes.

A message log carries bytes; the log sources hand out Arrow batches of one schema, and the log
sinks take any batch. A `RecordFormat` does both directions for a list of payloads at a time:

- `JsonFormat(schema)`: a JSON object per message, parsed by pyarrow's JSON reader in C, a
  fetch at a time (the payloads joined as JSON lines); fields outside the schema are ignored,
  missing ones are null. Written as one object per record, keyed by column name.
- `AvroFormat(schema)`: Avro's binary encoding of one record per message, without a container
  header (what Kafka and NATS producers send, minus any schema-registry framing), by `fastavro`
  (the `avro` extra); the Arrow schema follows from the Avro one.
- `RawFormat()`: the payload as it is, in one `value` column of bytes.

A message that does not decode is not a row: `decode` returns it as bad, with the reason, and
the source applies the job's `on_error` to it (fail, skip or dead-letter; docs/bad-records.md).
"""

from __future__ import annotations

import io
import json
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.json as pjson

from ...runtime.wire.batches import binary_buffers, to_records
from ...runtime.wire.elements import Batch
from ...validation import check_instance
from ..extras import require
from ..json_lines import encode_record, json_objects

__all__ = ["AvroFormat", "Decoded", "JsonFormat", "RawFormat", "RecordFormat"]

_ONE_THREAD = pjson.ReadOptions(use_threads=False, block_size=1 << 24)  # a worker is one process on one core


@dataclass(slots=True)
class Decoded:
    """The rows of the payloads that decoded, in order, and the others: (index, reason)."""

    batch: pa.RecordBatch
    bad: list[tuple[int, str]] = field(default_factory=list)


class RecordFormat(ABC):
    """Decodes payloads into Arrow rows of `schema`, and encodes records into payloads."""

    schema: pa.Schema

    @abstractmethod
    def decode(self, payloads: Sequence[bytes]) -> Decoded:
        """The rows of `payloads`; never raises for a payload that does not decode."""

    @abstractmethod
    def encode(self, batch: Batch) -> list[bytes]:
        """A payload per record of `batch` (a list of records or an Arrow batch)."""


class JsonFormat(RecordFormat):
    """A JSON object per message, read into the columns of `schema` (by name).

    Args:
        schema: the columns and their types; fields outside it are ignored, missing ones null.
            Timestamps may be ISO 8601 strings or numbers of the column's unit.
    """

    def __init__(self, schema: pa.Schema) -> None:
        self.schema = check_instance("schema", schema, pa.Schema)
        self._options = pjson.ParseOptions(explicit_schema=schema, unexpected_field_behavior="ignore")

    def decode(self, payloads: Sequence[bytes]) -> Decoded:
        if not payloads:
            return Decoded(_empty(self.schema))
        joined = b"\n".join(payloads)
        # a message may span lines (pretty-printed JSON); a newline in JSON is only ever
        # whitespace between tokens (strings escape theirs), so it can become a space
        if joined.count(b"\n") != len(payloads) - 1 or b"\r" in joined:
            joined = b"\n".join(p.replace(b"\n", b" ").replace(b"\r", b" ") for p in payloads)
        if b"\n\n" not in joined and joined[:1] != b"\n" and joined[-1:] != b"\n":
            try:
                return Decoded(self._rows(self._parse(joined), len(payloads)))
            except (pa.ArrowInvalid, ValueError):
                pass  # one of them does not parse: find which
        good: list[int] = []
        bad: list[tuple[int, str]] = []
        for i, payload in enumerate(payloads):
            reason = self._check(payload)
            if reason is None:
                good.append(i)
            else:
                bad.append((i, reason))
        if not good:
            return Decoded(_empty(self.schema), bad)
        kept = b"\n".join(payloads[i].replace(b"\n", b" ").replace(b"\r", b" ") for i in good)
        return Decoded(self._rows(self._parse(kept), len(good)), bad)

    def _parse(self, text: bytes) -> pa.Table:
        return pjson.read_json(pa.BufferReader(text), read_options=_ONE_THREAD, parse_options=self._options)

    def _rows(self, table: pa.Table, expected: int) -> pa.RecordBatch:
        if table.num_rows != expected:
            raise ValueError(f"{table.num_rows} rows from {expected} messages")
        batch = table.combine_chunks().to_batches()
        return batch[0] if batch else _empty(self.schema)

    def _check(self, payload: bytes) -> str | None:
        """Why one payload is not a row of the schema, or None if it is one."""
        try:
            value = json.loads(payload)
        except (ValueError, UnicodeDecodeError) as exc:
            return f"not JSON: {exc}"
        if not isinstance(value, dict):
            return f"a JSON {type(value).__name__}, not an object"
        try:
            self._rows(self._parse(payload.replace(b"\n", b" ").replace(b"\r", b" ")), 1)
        except (pa.ArrowInvalid, ValueError) as exc:
            return f"does not fit the schema: {exc}"
        return None

    def encode(self, batch: Batch) -> list[bytes]:
        if isinstance(batch, pa.RecordBatch):
            offsets, data = binary_buffers(json_objects(batch))
            raw = data.tobytes()
            base = int(offsets[0])
            return [raw[int(a) - base : int(b) - base] for a, b in zip(offsets[:-1], offsets[1:])]
        names = self.schema.names
        out = []
        for record in batch:
            if isinstance(record, tuple) and len(record) == len(names):
                record = dict(zip(names, record))  # tuples by position, as the sink's schema names them
            out.append(encode_record(record).encode("utf-8"))
        return out


class RawFormat(RecordFormat):
    """The payload's bytes, as they are, in one binary column `value`.

    Written: bytes as they are, strings as UTF-8, an Arrow batch's one column (or its `value`).
    """

    schema = pa.schema([("value", pa.binary())])

    def decode(self, payloads: Sequence[bytes]) -> Decoded:
        return Decoded(pa.RecordBatch.from_arrays([pa.array(payloads, pa.binary())], schema=self.schema))

    def encode(self, batch: Batch) -> list[bytes]:
        if isinstance(batch, pa.RecordBatch):
            names = batch.schema.names
            column = batch.column(names.index("value") if "value" in names else 0)
            values = column.to_pylist()
        else:
            values = batch
        return [_as_bytes(v) for v in values]


def _as_bytes(value: Any) -> bytes:
    if isinstance(value, bytes):
        return value
    if isinstance(value, (bytearray, memoryview)):
        return bytes(value)
    if isinstance(value, str):
        return value.encode("utf-8")
    raise TypeError(f"RawFormat writes bytes or str, not {type(value).__name__}: {value!r:.100}")


class AvroFormat(RecordFormat):
    """One Avro record per message, in Avro's binary encoding without a container header.

    Args:
        schema: the Avro schema of the records (a dict, or its JSON text): a `record`. Its
            fields become the columns; nullable unions (`["null", T]`) nullable columns;
            `timestamp-millis`/`-micros` timestamps in UTC; nested records structs, arrays
            lists, maps maps of strings, enums strings, fixed bytes.

    Needs `fastavro` (`pip install 'epochal[avro]'`).
    """

    def __init__(self, schema: dict[str, Any] | str) -> None:
        require("fastavro", "AvroFormat")  # one line naming the extra, if it is missing
        import fastavro
        raw = json.loads(schema) if isinstance(schema, str) else schema
        if not isinstance(raw, dict) or raw.get("type") != "record":
            raise ValueError(f"AvroFormat: the schema must be an Avro record, got {raw!r:.200}")
        self.avro_schema = raw
        self._parsed = fastavro.parse_schema(raw)
        self.schema = pa.schema([pa.field(f["name"], *_arrow_type(f["type"])) for f in raw["fields"]])

    def __getstate__(self) -> dict[str, Any]:
        return {"avro_schema": self.avro_schema}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["avro_schema"])  # type: ignore[misc]

    def decode(self, payloads: Sequence[bytes]) -> Decoded:
        from fastavro import schemaless_reader

        rows: list[Any] = []
        bad: list[tuple[int, str]] = []
        for i, payload in enumerate(payloads):
            stream = io.BytesIO(payload)
            try:
                row = schemaless_reader(stream, self._parsed, None)
                if stream.tell() != len(payload):
                    raise ValueError(f"{len(payload) - stream.tell()} bytes left after the record")
            except Exception as exc:  # noqa: BLE001 - any decoding error is the message's
                bad.append((i, f"not an Avro record of the schema: {type(exc).__name__}: {exc}"))
                continue
            rows.append(row)
        return Decoded(pa.RecordBatch.from_pylist(rows, schema=self.schema), bad)

    def encode(self, batch: Batch) -> list[bytes]:
        from fastavro import schemaless_writer

        names = self.schema.names
        records = batch.to_pylist() if isinstance(batch, pa.RecordBatch) else to_records(batch)
        out = []
        for record in records:
            if isinstance(record, tuple):
                record = dict(zip(names, record))
            stream = io.BytesIO()
            schemaless_writer(stream, self._parsed, record)
            out.append(stream.getvalue())
        return out


_PRIMITIVES: dict[str, pa.DataType] = {
    "null": pa.null(), "boolean": pa.bool_(), "int": pa.int32(), "long": pa.int64(), "float": pa.float32(),
    "double": pa.float64(), "bytes": pa.binary(), "string": pa.string(),
}
_LOGICAL: dict[tuple[str, str], pa.DataType] = {
    ("long", "timestamp-millis"): pa.timestamp("ms", tz="UTC"),
    ("long", "timestamp-micros"): pa.timestamp("us", tz="UTC"),
    ("int", "date"): pa.date32(),
    ("int", "time-millis"): pa.time32("ms"),
    ("long", "time-micros"): pa.time64("us"),
    ("string", "uuid"): pa.string(),
}


def _arrow_type(avro: Any) -> tuple[pa.DataType, bool]:
    """The Arrow type of an Avro type, and whether it is nullable."""
    if isinstance(avro, list):  # a union: only T or [null, T] map to one column
        others = [t for t in avro if t != "null"]
        if len(others) != 1:
            raise ValueError(f"AvroFormat: the union {avro} has no Arrow column type (only [\"null\", T] has)")
        return _arrow_type(others[0])[0], "null" in avro
    if isinstance(avro, str):
        if avro not in _PRIMITIVES:
            raise ValueError(f"AvroFormat: named type references ({avro!r}) are not supported; inline the type")
        return _PRIMITIVES[avro], avro == "null"
    kind, logical = avro.get("type"), avro.get("logicalType")
    if (kind, logical) in _LOGICAL:
        return _LOGICAL[(kind, logical)], False
    if kind == "record":
        return pa.struct([pa.field(f["name"], *_arrow_type(f["type"])) for f in avro["fields"]]), False
    if kind == "array":
        return pa.list_(_arrow_type(avro["items"])[0]), False
    if kind == "map":
        return pa.map_(pa.string(), _arrow_type(avro["values"])[0]), False
    if kind == "enum":
        return pa.string(), False
    if kind == "fixed":
        return pa.binary(), False
    if isinstance(kind, (str, list)):
        return _arrow_type(kind)
    raise ValueError(f"AvroFormat: no Arrow column type for {avro!r}")


def _empty(schema: pa.Schema) -> pa.RecordBatch:
    return pa.RecordBatch.from_pylist([], schema=schema)
