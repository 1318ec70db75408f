"""The staging file a FileSink's subtask writes until the next checkpoint (`files.py`), one type
per format, each writing Arrow batches without a Python object per record where it can."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any, ClassVar, Literal

import pyarrow as pa
import pyarrow.csv as pcsv
import pyarrow.fs as pafs

from ..runtime.wire.batches import binary_buffers, to_records
from ..runtime.wire.elements import Batch
from .arrow_files import ROW_GROUP_ROWS, ArrowConformer, ParquetFileWriter, fsync
from .json_lines import encode_record, json_lines

_BUFFER = 1 << 16  # bytes an output stream gathers per write: one write call per small batch is slow


class StagedFile(ABC):
    """The staging file a subtask writes until the next checkpoint, in one format."""

    extension: ClassVar[str]

    def __init__(self, fs: pafs.FileSystem, path: str) -> None:
        self.fs = fs
        self.path = path

    def _open(self) -> Any:
        return self.fs.open_output_stream(self.path, compression=None, buffer_size=_BUFFER)

    @abstractmethod
    def write(self, batch: Batch) -> None: ...

    @abstractmethod
    def _close(self) -> None:
        """Close the file as it stands."""

    def finish(self) -> None:
        """Close the file; fsynced on a local disk, so the commit's rename cannot outlive its data."""
        self._close()
        if isinstance(self.fs, pafs.LocalFileSystem):
            fsync(self.path)

    def abort(self) -> None:
        """Close without finishing (what was written stays, for recovery to delete)."""
        self._close()


class JsonLinesFile(StagedFile):
    extension = "jsonl"

    def __init__(self, fs: pafs.FileSystem, path: str, encode: Callable[[Any], str] | None) -> None:
        super().__init__(fs, path)
        self.encode = encode  # None: the default encoding, vectorized for Arrow batches
        self._stream: Any = self._open()

    def write(self, batch: Batch) -> None:
        if isinstance(batch, pa.RecordBatch) and self.encode is None and batch.num_columns:
            offsets, data = binary_buffers(json_lines(batch))
            self._stream.write(data[offsets[0] : offsets[-1]])
            return
        encode = self.encode or encode_record
        self._stream.write("".join(encode(r) + "\n" for r in to_records(batch)).encode("utf-8"))

    def _close(self) -> None:
        if self._stream is not None:
            self._stream.close()
            self._stream = None


class CsvFile(StagedFile):
    extension = "csv"

    def __init__(self, fs: pafs.FileSystem, path: str, conform: ArrowConformer) -> None:
        super().__init__(fs, path)
        self.conform = conform
        self._stream: Any = None
        self._writer: pcsv.CSVWriter | None = None

    def write(self, batch: Batch) -> None:
        arrow = self.conform(batch)
        if self._writer is None:
            self._stream = self._open()
            self._writer = pcsv.CSVWriter(self._stream, arrow.schema)  # the header, once per file
        self._writer.write_batch(arrow)

    def _close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._stream.close()
            self._writer = self._stream = None


class ParquetFile(StagedFile):
    extension = "parquet"

    def __init__(self, fs: pafs.FileSystem, path: str, conform: ArrowConformer) -> None:
        super().__init__(fs, path)
        self.conform = conform
        self._file: ParquetFileWriter | None = None

    def write(self, batch: Batch) -> None:
        arrow = self.conform(batch)
        if self._file is None:
            self._file = ParquetFileWriter(self.fs, self.path, arrow.schema, "snappy", ROW_GROUP_ROWS)
        self._file.write(arrow)

    def finish(self) -> None:
        if self._file is not None:
            self._file.finish()  # writes the rows it buffers for a row group, closes and fsyncs

    def _close(self) -> None:
        if self._file is not None:
            self._file.abort()


def staged_file(
    format: Literal["jsonl", "csv", "parquet"],
    fs: pafs.FileSystem,
    path: str,
    conform: ArrowConformer,
    encode: Callable[[Any], str] | None,
) -> StagedFile:
    """A new staging file at `path` in `format` (`encode`: JSON lines' record encoder, None for the default)."""
    if format == "csv":
        return CsvFile(fs, path, conform)
    if format == "parquet":
        return ParquetFile(fs, path, conform)
    return JsonLinesFile(fs, path, encode)
