"""Nexmark events with one top-level column per field: the layout Spark reads best, and files both
systems of a benchmark read (issue 36: Epochal reading the same Parquet files Spark SS reads).

`flatten` turns a batch of events (`EVENT_SCHEMA`) into columns `kind`, `dateTime` and `p_`,
`a_`, `b_` + each kind's Nexmark field names (null on rows of other kinds; dictionary columns as
strings); `unflatten` turns such a batch back into the stream's layout (a struct column per kind,
null where the row is of another kind), without copying a column: what a job reading such files
(`ParquetSource`) puts in front of the queries.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from .schema import KIND_COLUMNS, KIND_SCHEMAS, EventKind

PREFIXES = {EventKind.PERSON: "p_", EventKind.AUCTION: "a_", EventKind.BID: "b_"}


def flatten(events: pa.RecordBatch | pa.Table) -> pa.Table:
    """Events with one top-level column per field (see the module docstring)."""
    columns: dict[str, pa.Array] = {"kind": events.column("kind"), "dateTime": events.column("dateTime")}
    for kind, prefix in PREFIXES.items():
        column = events.column(KIND_COLUMNS[kind])
        if isinstance(column, pa.ChunkedArray):
            column = column.combine_chunks()
        for field, values in zip(column.type, column.flatten()):
            if field.name == "dateTime":
                continue  # the top-level dateTime
            if pa.types.is_dictionary(field.type):
                values = pc.cast(values, field.type.value_type)
            columns[prefix + field.name] = values
    return pa.table(columns)


def unflatten(batch: pa.RecordBatch) -> pa.RecordBatch:
    """Flattened events back in the stream's layout: `kind`, `dateTime` and a struct column per
    kind (its fields in `KIND_SCHEMAS` order; dictionary fields stay strings)."""
    kinds, time = batch.column("kind"), batch.column("dateTime")
    columns, names = [kinds, time], ["kind", "dateTime"]
    for kind, prefix in PREFIXES.items():
        fields = [time if f.name == "dateTime" else batch.column(prefix + f.name) for f in KIND_SCHEMAS[kind]]
        other = pc.not_equal(kinds, pa.scalar(int(kind), kinds.type))
        columns.append(pa.StructArray.from_arrays(fields, names=KIND_SCHEMAS[kind].names, mask=other))
        names.append(KIND_COLUMNS[kind])
    return pa.RecordBatch.from_arrays(columns, names=names)
