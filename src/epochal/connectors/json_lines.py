"""JSON lines from Arrow columns, without a Python object per record (`FileSink`'s encoder).

pyarrow has no JSON writer, so each column becomes JSON text with `pyarrow.compute` and the
columns are joined into a line per row, as `json.dumps` writes the row's tuple: strings,
integers, booleans and nulls byte for byte, floats as the same values (possibly in another
notation). Columns of other types go through `json.dumps` value by value.

Values JSON has no type for are written as Spark's JSON writer writes them, so a record read
from Arrow (a timestamp column, a decimal) can always be written: dates and times as ISO 8601
strings, decimals as their exact text, bytes as base64, numpy scalars as their Python values,
durations as seconds.
"""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import json
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..runtime.wire.batches import binary_buffers

__all__ = ["encode_record", "json_lines", "json_objects"]


def encode_record(record: Any) -> str:
    """A record's JSON line (without its newline), compact, as `read_committed` reads it back."""
    return json.dumps(record, separators=(",", ":"), ensure_ascii=False, default=_json_value)


def _json_value(value: Any) -> Any:
    """What JSON writes for a value it has no type for (json.dumps' `default`)."""
    if isinstance(value, (dt.datetime, dt.date, dt.time)):
        return value.isoformat()
    if isinstance(value, decimal.Decimal):
        return str(value)
    if isinstance(value, (bytes, bytearray, memoryview)):
        return base64.b64encode(value).decode("ascii")
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, dt.timedelta):
        return value.total_seconds()
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


# -- JSON text of Arrow columns --------------------------------------------------------------------
_QUOTE, _BACKSLASH, _SPACE = ord('"'), ord("\\"), 0x20
# how json.dumps writes the control characters: five short escapes, the others as \u00XX
_CONTROL = {chr(c): {"\n": "\\n", "\r": "\\r", "\t": "\\t", "\b": "\\b", "\f": "\\f"}.get(chr(c), f"\\u{c:04x}")
            for c in range(_SPACE)}


def json_lines(batch: pa.RecordBatch) -> pa.StringArray:
    """The JSON line of each row, as `json.dumps` writes the row's record: a one-column row is
    the bare value, a wider one an array of its columns (newline included)."""
    columns = [_json_text(c) for c in batch.columns]
    n = batch.num_rows
    parts: list[Any] = [pa.repeat("[", n)] if len(columns) > 1 else []  # arrays: scalars broadcast slower
    comma = pa.repeat(",", n)
    for i, column in enumerate(columns):
        parts.extend([comma, column] if i else [column])
    parts.append(pa.repeat("]\n" if len(columns) > 1 else "\n", n))
    return pc.binary_join_element_wise(*parts, "")


def json_objects(batch: pa.RecordBatch) -> pa.StringArray:
    """Each row as a JSON object keyed by its column names (no newline): what a message log
    carries per record, and what a JSON reader with a schema reads back by name."""
    n = batch.num_rows
    if not batch.num_columns:
        return pa.repeat("{}", n).cast(pa.string())
    parts: list[Any] = []
    for i, (name, column) in enumerate(zip(batch.schema.names, batch.columns)):
        key = json.dumps(str(name), ensure_ascii=False)
        parts.extend([pa.repeat(("{" if i == 0 else ",") + key + ":", n), _json_text(column)])
    parts.append(pa.repeat("}", n))
    return pc.binary_join_element_wise(*parts, "")


def _json_text(column: pa.Array) -> pa.Array:
    """Each value of `column` as JSON text; null as `null`."""
    kind = column.type
    if pa.types.is_dictionary(kind):
        return _json_text(column.dictionary_decode())
    if pa.types.is_null(kind):
        text = pa.nulls(len(column), pa.string())
    elif pa.types.is_boolean(kind):
        text = pc.if_else(column, "true", "false")
    elif pa.types.is_integer(kind):
        text = column.cast(pa.string())
    elif pa.types.is_floating(kind):
        text = _json_floats(column)
    elif pa.types.is_string(kind) or pa.types.is_large_string(kind):
        text = pc.binary_join_element_wise('"', _json_escape(column.cast(pa.string())), '"', "")
    else:  # timestamps, decimals, binary, nested: as json.dumps takes their Python values
        text = pa.array([encode_record(v) for v in column.to_pylist()], pa.string())
    return text.fill_null("null")


def _json_floats(column: pa.Array) -> pa.Array:
    # Arrow writes the shortest text that reads back as the same double (a float32 is widened
    # first, as Python widens it); an integral one needs `.0` to read back as a float, and
    # json.dumps writes NaN and Infinity for what Arrow calls nan and inf
    text = column.cast(pa.float64()).cast(pa.string())
    text = pc.if_else(pc.match_substring_regex(text, "[.en]"), text, pc.binary_join_element_wise(text, ".0", ""))
    text = pc.replace_substring_regex(text, "^(-?)inf$", r"\1Infinity")
    return pc.replace_substring(text, "nan", "NaN")


def _json_escape(strings: pa.Array) -> pa.Array:
    """`strings` with `"`, `\\` and control characters escaped as json.dumps escapes them
    (`ensure_ascii=False`: other characters stay). A check of the bytes first: most strings
    need no escape, and a byte below 0x80 is never part of a multi-byte UTF-8 character."""
    offsets, data = binary_buffers(strings)
    data = data[offsets[0] :]  # a slice's buffer holds the rows before it too
    if bool(((data == _QUOTE) | (data == _BACKSLASH)).any()):
        strings = pc.replace_substring(pc.replace_substring(strings, "\\", "\\\\"), '"', '\\"')
    if bool((data < _SPACE).any()):
        for char in np.unique(data[data < _SPACE]):
            strings = pc.replace_substring(strings, chr(char), _CONTROL[chr(char)])
    return strings
