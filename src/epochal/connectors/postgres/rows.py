"""Records to rows of a PostgreSQL table, and rows into COPY.

A batch becomes an Arrow batch of the target's columns: Arrow batches by column name, tuples by
position, dicts by key, a bare value as the one column. COPY takes them as CSV that pyarrow
writes column by column (strings quoted, a NULL an unquoted empty field, so the two stay
apart); types pyarrow's CSV writer has no text for (lists, structs, binary, durations) go
through psycopg's own COPY row by row.
"""

from __future__ import annotations

import io
import json
from collections.abc import Sequence
from typing import Any

import pyarrow as pa
import pyarrow.csv as pcsv

from ...runtime.wire.batches import to_records
from ...runtime.wire.elements import Batch

_CSV_OPTIONS = pcsv.WriteOptions(include_header=False, quoting_style="needed")


def to_columns(batch: Batch, columns: Sequence[str]) -> pa.RecordBatch:
    """The batch as an Arrow batch of exactly `columns`, in that order."""
    if isinstance(batch, pa.RecordBatch):
        names = batch.schema.names
        if all(c in names for c in columns):
            return pa.RecordBatch.from_arrays([batch.column(c) for c in columns], names=list(columns))
        if batch.num_columns == len(columns):
            return pa.RecordBatch.from_arrays(batch.columns, names=list(columns))
        missing = [c for c in columns if c not in names]
        raise ValueError(f"the batch's columns {names} lack {missing} of the table's {list(columns)}")
    rows = to_records(batch)
    if not rows:
        return pa.RecordBatch.from_arrays([pa.array([])] * len(columns), names=list(columns))
    first = rows[0]
    if isinstance(first, dict):
        values = [[r.get(c) for r in rows] for c in columns]
    elif isinstance(first, tuple | list):
        bad = next((r for r in rows if not isinstance(r, tuple | list) or len(r) != len(columns)), None)
        if bad is not None:
            raise ValueError(f"record {bad!r} does not have the {len(columns)} columns {list(columns)}")
        values = [list(c) for c in zip(*rows)]
    elif len(columns) == 1:
        values = [rows]
    else:
        raise ValueError(f"record {first!r} is one value, but the table takes {len(columns)} columns {list(columns)}")
    return pa.RecordBatch.from_arrays([_array(v) for v in values], names=list(columns))


def _array(values: list[Any]) -> pa.Array:
    try:
        return pa.array(values)
    except (pa.ArrowInvalid, pa.ArrowTypeError):  # mixed types: the server parses their text
        return pa.array([None if v is None else _text(v) for v in values], pa.string())


def _text(value: Any) -> str:
    return json.dumps(value) if isinstance(value, dict | list) else str(value)


def _csv_safe(field: pa.Field) -> bool:
    t = field.type
    return not (pa.types.is_nested(t) or pa.types.is_binary(t) or pa.types.is_large_binary(t)
                or pa.types.is_duration(t) or pa.types.is_dictionary(t) or pa.types.is_fixed_size_binary(t))


def copy_rows(cursor: Any, target: str, batch: pa.RecordBatch) -> None:
    """COPY `batch` into `target` (a quoted name with its column list)."""
    if all(_csv_safe(f) for f in batch.schema):
        sink = io.BytesIO()
        pcsv.write_csv(batch, sink, _CSV_OPTIONS)
        with cursor.copy(f"COPY {target} FROM STDIN (FORMAT csv)") as copy:
            copy.write(sink.getvalue())
        return
    with cursor.copy(f"COPY {target} FROM STDIN") as copy:
        for row in zip(*(c.to_pylist() for c in batch.columns)):
            copy.write_row([json.dumps(v) if isinstance(v, dict | list) else v for v in row])


def row_of(batch: pa.RecordBatch, i: int) -> dict[str, Any]:
    """Row `i` of a batch as a dict, for messages and dead letters."""
    return {name: batch.column(j)[i].as_py() for j, name in enumerate(batch.schema.names)}
