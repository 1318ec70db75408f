"""A Spark catalog table as a replayable source, read through its files.

A table is read as a dataset of Parquet files (`connectors.datasets`). A Delta table
is read at one version, pinned when the source is made, so every subtask, attempt and restore
reads the same files: the source is replayable although the table moves on. A Spark catalog
table (`env.from_table(spark, "db.events")`) is looked up once, on the driver, for its location
and format: Parquet tables are read through their directory (Hive-style partitions), Delta
tables as above.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from ..api.connector import Source
from ..errors import EpochalError
from ..state.checked_files import resolve_uri
from .datasets import DatasetSource

if TYPE_CHECKING:
    import pyarrow.dataset as ds

__all__ = ["ParquetTableSource", "table_source"]


class ParquetTableSource(DatasetSource):
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
