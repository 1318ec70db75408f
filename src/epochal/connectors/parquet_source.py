"""ParquetSource: the rows of Parquet files, a row group per split, replayable by row offset.

A row group is Parquet's unit of reading (its columns are stored together), so it is the split:
a large file is read by several subtasks, and a split's position is the number of its rows
handed out, so a restore resumes at the first row not handed out. The footer of each file is
read once, where the splits are listed (on the job master for a watched directory); a file
whose footer does not read is still a split, whose reader fails naming the file, so a corrupt
file is never skipped in silence.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from ..api.connector import SplitReader
from ..errors import EpochalError
from ..validation import check_bool
from .file_source import FileSource

__all__ = ["ParquetSource", "RowGroupReader", "RowGroupSplit", "one_batch"]


@dataclass(frozen=True, slots=True)
class RowGroupSplit:
    split_id: str
    path: str
    row_group: int
    rows: int  # -1: the file's footer did not read (its reader says why)
    error: str = ""


class RowGroupReader(SplitReader):
    """Loads one row group at the first read and hands out slices of it; the position is the
    number of its rows handed out."""

    def __init__(self, split: RowGroupSplit, position: int | None) -> None:
        self.split = split
        self.done = position or 0
        self._rows: pa.RecordBatch | None = None

    def load(self) -> pa.Table:
        raise NotImplementedError

    def read(self, max_records: int) -> pa.RecordBatch | None:
        if self.done >= self.split.rows:
            return None
        if self._rows is None:  # one batch: each read is then a zero-copy slice of it
            self._rows = one_batch(self.load())
        n = min(max_records, self.split.rows - self.done)
        rows = self._rows.slice(self.done, n)
        self.done += n
        return rows

    def position(self) -> int:
        return self.done


def one_batch(table: pa.Table) -> pa.RecordBatch:
    """A table as one record batch (its columns made contiguous first)."""
    batches = table.combine_chunks().to_batches()
    if len(batches) == 1:
        return batches[0]
    if table.num_rows == 0:
        return pa.RecordBatch.from_pylist([], schema=table.schema)
    return pa.RecordBatch.from_struct_array(table.to_struct_array().combine_chunks())


class _ParquetRowGroup(RowGroupReader):
    def __init__(self, fs: pafs.FileSystem, split: RowGroupSplit, position: int | None, columns: list[str] | None):
        if split.rows < 0:
            raise EpochalError(f"{split.path}: not a readable Parquet file ({split.error})")
        super().__init__(split, position)
        self.fs, self.columns = fs, columns

    def load(self) -> pa.Table:
        try:
            with self.fs.open_input_file(self.split.path) as f:
                return pq.ParquetFile(f).read_row_group(self.split.row_group, columns=self.columns)
        except (OSError, pa.ArrowException) as exc:
            where = f"{self.split.path}: row group {self.split.row_group}"
            raise EpochalError(f"{where} does not read ({exc})") from exc


class ParquetSource(FileSource):
    """Rows of a Parquet file, or of the Parquet files under a directory, as Arrow batches.

    Args:
        path: a file or a directory: a local path or a pyarrow URI (`s3://…`). Names that
            start with `.` or `_` are skipped (Spark's `_SUCCESS`, `_spark_metadata`).
        columns: the columns to read (all of them by default).
        watch: follow the directory (`True`: every second; seconds), as `TextFileSource` does:
            a file must be complete when it appears under its name.
        in_order: the files, in name order, are in event-time order (each one's rows after the
            previous one's, as a stream written in parts is): with event time, each subtask
            reads its splits one after another and its watermark follows the split it reads,
            instead of reading every split at once, held back by the earliest. Without it a
            subtask opens all its splits at once when the job has event time.
    """

    def __init__(
        self, path: str | os.PathLike[str], columns: Sequence[str] | None = None, *, watch: bool | float = False,
        in_order: bool = False,
    ) -> None:
        super().__init__(path, watch)
        self.columns = None if columns is None else [str(c) for c in columns]
        self.in_order = check_bool("in_order", in_order)

    def file_splits(self, info: pafs.FileInfo, name: str) -> Sequence[RowGroupSplit]:
        fs, _ = self.target()
        try:
            with fs.open_input_file(info.path) as f:
                meta = pq.ParquetFile(f).metadata
        except (OSError, pa.ArrowException) as exc:
            return [RowGroupSplit(f"{name}#0", info.path, 0, -1, str(exc))]
        groups = range(meta.num_row_groups)
        return [RowGroupSplit(f"{name}#{i}", info.path, i, meta.row_group(i).num_rows) for i in groups]

    def open_split(self, split: Any, position: Any | None) -> SplitReader:
        return _ParquetRowGroup(self.target()[0], split, position, self.columns)
