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
    kind (its fields in `KIND_SCHEMAS` order; dictionary fields stay strings). A batch read with
    only some columns (a query that reads a few fields, as Spark reads only the columns a query
    uses) gives structs of those fields, and no struct for a kind none of whose fields it has."""
    kinds, time = batch.column("kind"), batch.column("dateTime")
    columns, names = [kinds, time], ["kind", "dateTime"]
    present = set(batch.schema.names)
    for kind, prefix in PREFIXES.items():
        schema = KIND_SCHEMAS[kind]
        kept = [f.name for f in schema if f.name == "dateTime" or prefix + f.name in present]
        if kept == ["dateTime"] and len(schema) > 1:
            continue  # none of this kind's fields were read
        fields = [time if name == "dateTime" else batch.column(prefix + name) for name in kept]
        other = pc.not_equal(kinds, pa.scalar(int(kind), kinds.type))
        columns.append(pa.StructArray.from_arrays(fields, names=kept, mask=other))
        names.append(KIND_COLUMNS[kind])
    return pa.RecordBatch.from_arrays(columns, names=names)


def flat_columns(reads: dict[EventKind, list[str]]) -> list[str]:
    """The flattened columns that hold the given fields of each kind (with `kind` and
    `dateTime`): what a job that uses only those fields reads of the files."""
    return ["kind", "dateTime", *(PREFIXES[kind] + name for kind, names in reads.items() for name in names
                                  if name != "dateTime")]
