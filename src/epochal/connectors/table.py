"""Tables as replayable sources: datasets of Parquet files (a Delta table at a version, in
`connectors.delta.source`), and a Spark catalog table through its files.

A table is read as a pyarrow dataset of Parquet files, a row group per split (as
`ParquetSource`), with the table's partition columns filled in from its metadata. A Delta table
is read at one version, pinned when the source is made, so every subtask, attempt and restore
reads the same files: the source is replayable although the table moves on. A Spark catalog
table (`env.from_table(spark, "db.events")`) is looked up once, on the driver, for its location
and format: Parquet tables are read through their directory (Hive-style partitions), Delta
tables as above.
"""

from __future__ import annotations

import posixpath
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from ..api.connector import Source, SplitReader
from ..errors import EpochalError
from ..state.checked_files import resolve_uri
from .parquet_source import RowGroupReader, RowGroupSplit

if TYPE_CHECKING:
    import pyarrow.dataset as ds

__all__ = ["ParquetTableSource", "table_source"]


class _RowGroupOfDataset(RowGroupReader):
    def __init__(self, source: _DatasetSource, split: RowGroupSplit, position: int | None) -> None:
        super().__init__(split, position)
        self.source = source

    def load(self) -> pa.Table:
        return self.source.row_group(self.split)


class _DatasetSource(Source):
    """The row groups of a pyarrow dataset of Parquet fragments (built once per process)."""

    def __init__(self, columns: Sequence[str] | None) -> None:
        self.columns = None if columns is None else [str(c) for c in columns]
        self._dataset: ds.Dataset | None = None
        self._fragments: dict[str, Any] = {}

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_dataset": None, "_fragments": {}}

    def build(self) -> ds.Dataset:
        raise NotImplementedError

    def dataset(self) -> ds.Dataset:
        if self._dataset is None:
            self._dataset = self.build()
            self._fragments = {f.path: f for f in self._dataset.get_fragments()}
        return self._dataset

    def splits(self) -> Sequence[RowGroupSplit]:
        self.dataset()
        out = []
        for path in sorted(self._fragments):
            name = posixpath.basename(posixpath.dirname(path)) + "/" + posixpath.basename(path)
            for i, group in enumerate(self._fragments[path].split_by_row_group()):
                out.append(RowGroupSplit(f"{name}#{i}", path, i, group.row_groups[0].num_rows))
        return out

    def row_group(self, split: RowGroupSplit) -> pa.Table:
        dataset = self.dataset()
        fragment = self._fragments.get(split.path)
        if fragment is None:
            raise EpochalError(f"{split.path}: no longer a file of the table (was it vacuumed?)")
        group = fragment.split_by_row_group()[split.row_group]
        return group.to_table(schema=dataset.schema, columns=self.columns)

    def open_split(self, split: Any, position: Any | None) -> SplitReader:
        return _RowGroupOfDataset(self, split, position)


class ParquetTableSource(_DatasetSource):
    """A directory of Parquet files with Hive-style partition directories (`part=1/`), as Spark
    writes a Parquet table; partition columns come from the directory names, with the types
    `partitions` gives (Spark's SQL names: `string`, `int`, `bigint`, `date`, …), else inferred."""

    def __init__(
        self, path: str, columns: Sequence[str] | None = None, partitions: Sequence[tuple[str, str]] = ()
    ) -> None:
        super().__init__(columns)
        self.path = path
        self.partitions = [(str(n), str(t)) for n, t in partitions]

    def build(self) -> ds.Dataset:
        import pyarrow.dataset as ds  # it imports pandas: not at `import epochal`

        fs, root = resolve_uri(self.path)
        partitioning: Any = "hive"
        if self.partitions:
            fields = [(name, _ARROW_TYPES.get(kind.lower(), pa.string())) for name, kind in self.partitions]
            partitioning = ds.partitioning(pa.schema(fields), flavor="hive")
        return ds.dataset(root, filesystem=fs, format="parquet", partitioning=partitioning)


# Spark SQL type names of partition columns, as Arrow types (others are read as strings)
_ARROW_TYPES = {
    "string": pa.string(), "tinyint": pa.int8(), "smallint": pa.int16(), "int": pa.int32(), "bigint": pa.int64(),
    "float": pa.float32(), "double": pa.float64(), "boolean": pa.bool_(), "date": pa.date32(),
}


def table_source(spark: Any, name: str, columns: Sequence[str] | None = None) -> Source:
    """The source of a Spark catalog table, found through `DESCRIBE TABLE EXTENDED`."""
    details = {r.col_name: r.data_type for r in spark.sql(f"DESCRIBE TABLE EXTENDED {name}").collect()}
    location, provider = details.get("Location"), (details.get("Provider") or "").lower()
    if not location:
        raise EpochalError(f"from_table: {name} has no location (a view?); only tables with files can be read")
    if location.startswith("file:") and not location.startswith("file://"):
        location = "/" + location[len("file:") :].lstrip("/")  # Hadoop's file:/path
    if provider == "parquet":
        partitions = [(c.name, c.dataType) for c in spark.catalog.listColumns(name) if c.isPartition]
        return ParquetTableSource(location, columns, partitions)
    if provider == "delta":
        from .delta.source import DeltaSource

        return DeltaSource(location, columns=columns)
    raise EpochalError(f"from_table: {name} is a {provider or 'unknown'} table; Parquet and Delta tables can be read")
