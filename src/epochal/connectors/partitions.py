"""Hive-style partitioned output for `ParquetSink(partition_by=...)`: a directory per value.

A row goes to `<path>/<col>=<value>/.../part-*.parquet`, as Spark's file sink and
`DataFrameWriter.partitionBy` write it: the partition columns are left out of the files (their
values are in the directory names), values are escaped as Spark escapes them (`:` as `%3A`, ...),
and a null is `__HIVE_DEFAULT_PARTITION__`. Each subtask keeps one staging file per partition it
wrote to in the current checkpoint; they are committed together, as one committable
(`PendingParquetFiles`), exactly once like the unpartitioned sink's single file.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from ..api.connector import SinkWriter
from ..runtime.wire.elements import Batch
from .arrow_files import ArrowConformer, ParquetFileWriter
from .part_files import PartFiles, PendingFile, StagedName

if TYPE_CHECKING:
    from .parquet import ParquetSink

NULL_PARTITION = "__HIVE_DEFAULT_PARTITION__"
# the characters Spark escapes in partition values (ExternalCatalogUtils.escapePathName)
_ESCAPED = frozenset([chr(c) for c in range(0x01, 0x20)] + list('"#%\'*/:=?\\\x7f{[]^'))


def escape(value: Any) -> str:
    """A partition value as Spark writes it in a directory name."""
    if value is None:
        return NULL_PARTITION
    text = value if isinstance(value, str) else str(value)
    if not text:
        return NULL_PARTITION
    return "".join(f"%{ord(c):02X}" if c in _ESCAPED else c for c in text)


def partition_dir(names: Sequence[str], values: Sequence[Any]) -> str:
    return "/".join(f"{escape(n)}={escape(v)}" for n, v in zip(names, values))


def split_by_partition(batch: pa.RecordBatch, names: Sequence[str]) -> Iterator[tuple[str, pa.RecordBatch]]:
    """`(partition directory, its rows without the partition columns)` for each partition of the batch."""
    missing = [n for n in names if n not in batch.schema.names]
    if missing:
        raise ValueError(f"ParquetSink: the records have no partition column {missing[0]!r} "
                         f"(columns: {batch.schema.names})")
    rest = [n for n in batch.schema.names if n not in names]
    table = pa.Table.from_batches([batch])
    distinct = table.select(list(names)).group_by(list(names), use_threads=False).aggregate([])
    for row in distinct.to_pylist():
        mask = None
        for name in names:
            value = row[name]
            column = table.column(name)
            here = pc.is_null(column) if value is None else pc.fill_null(pc.equal(column, value), False)
            mask = here if mask is None else pc.and_(mask, here)
        part = table.filter(mask).select(rest).combine_chunks()
        for piece in part.to_batches():
            yield partition_dir(names, [row[n] for n in names]), piece


@dataclass(frozen=True, slots=True)
class PendingParquetFiles:
    """One subtask's staging files of one checkpoint, one per partition: committed together."""

    files: tuple[PendingFile, ...]


class PartitionedWriter(SinkWriter):
    """A `ParquetSink` subtask's writer with `partition_by`: one staging file per partition."""

    def __init__(self, sink: ParquetSink, subtask: int, parts: PartFiles) -> None:
        self.sink = sink
        self.fs = parts.fs
        self.parts = parts  # named by (subtask, checkpoint, lineage) in each partition, as unpartitioned
        self._conform = ArrowConformer(sink.schema)
        self._files: dict[str, tuple[ParquetFileWriter, StagedName]] = {}

    def set_lineage(self, lineage: str) -> None:
        """A replayed epoch's file has the name its first commit took: `ParquetSink.commit` skips it."""
        self.parts.set_lineage(lineage)

    def write(self, batch: Batch) -> None:
        for directory, rows in split_by_partition(self._conform(batch), self.sink.partition_by):
            held = self._files.get(directory)
            if held is None:
                self.fs.create_dir(f"{self.parts.root}/{directory}")
                staged = self.parts.new_staging(directory)
                held = self._files[directory] = (
                    ParquetFileWriter(self.fs, staged.path, rows.schema, self.sink.compression,
                                      self.sink.row_group_rows),
                    staged,
                )
            held[0].write(rows)

    def prepare_commit(self, checkpoint_id: int) -> PendingParquetFiles | None:
        files, self._files = self._files, {}
        pending = [
            self.parts.pending(staged, checkpoint_id, "parquet", directory)
            for directory, (file, staged) in sorted(files.items())
            if file.finish() is not None
        ]
        return PendingParquetFiles(tuple(pending)) if pending else None

    def recover(self) -> None:
        self.parts.drop_uncommitted(recursive=True)

    def close(self) -> None:
        for file, _ in self._files.values():
            file.abort()
        self._files = {}


__all__ = ["NULL_PARTITION", "PartitionedWriter", "PendingParquetFiles", "escape", "partition_dir",
           "split_by_partition"]
