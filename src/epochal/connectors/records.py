"""JsonLinesSource and CsvSource: files of one record per line, parsed by pyarrow into Arrow
batches, replayable by byte offset.

They cut files into splits like `TextFileSource` (a split owns the lines that start inside it)
and read a block of about 1 MB of whole lines at a time; pyarrow's JSON or CSV reader parses the
block in C, so no Python object is made per record. A record's position is the byte offset
just past its line, so a restore resumes at the first record not handed out. Blank lines are
skipped. A line that does not parse fails the job with an error that names the file, the byte
offset and the line (the operator is named by the source operator's error around it).

One record per line is the price of splitting a file anywhere: a CSV field may not hold a
newline, as with Spark's default (`multiLine=false`).
"""

from __future__ import annotations

import csv
import json
import os
from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pcsv
import pyarrow.fs as pafs
import pyarrow.json as pjson

from ..api.connector import RejectedInput, SplitReader
from ..errors import EpochalError
from ..validation import check_instance, check_int
from .file_source import FileSource
from .parquet_source import one_batch
from .text import _DEFAULT_SPLIT, FileSplit, _LineReader, byte_splits

__all__ = ["JsonLinesSource", "CsvSource"]

_NEWLINE, _CR = ord("\n"), ord("\r")
_ONE_THREAD_JSON = pjson.ReadOptions(use_threads=False)  # a worker is one process on one core


class _RecordLineReader(_LineReader):
    """A line reader whose block is a table: the chunk parsed as a whole, blank lines dropped.

    Tolerating bad input, a chunk that does not parse is parsed again without the lines that do
    not parse alone; those are rejected, and handed out (`rejected`) once the position passes
    them, so a restore that re-reads them rejects them again, and a dead letter is never lost
    or doubled.
    """

    tolerant = False

    def tolerate_bad_input(self) -> None:
        self.tolerant = True
        self._rejects: list[tuple[int, RejectedInput]] = []  # (byte offset, rejected line), in order

    def rejected(self) -> list[RejectedInput]:
        if not self.tolerant or not self._rejects:
            return []
        passed = [r for at, r in self._rejects if at < self.pos]
        self._rejects = [(at, r) for at, r in self._rejects if at >= self.pos]
        return passed

    def _batch(self, rows: Any) -> pa.RecordBatch:
        return rows  # a zero-copy slice of the block's one record batch

    def _decode(self, chunk: bytes, newlines: np.ndarray) -> tuple[pa.Array | pa.Table, np.ndarray]:
        all_ends = self._line_ends(chunk, newlines)
        try:
            table = self._parse(chunk)
        except pa.ArrowInvalid as exc:
            lines = self._lines(chunk, newlines)
            kept = self._not_blank(lines)
            if not self.tolerant:
                raise self._bad_line(chunk, newlines, lines, kept, exc) from exc
            return self._without_bad_lines(chunk, newlines, lines, kept, exc)
        # A record per non-empty line: found from the bytes alone, as a rule; lines of nothing
        # but blanks (which the parser skips too) need the decoded lines.
        data = np.frombuffer(chunk, dtype=np.uint8)
        starts = np.concatenate(([0], all_ends[:-1]))
        content = all_ends - starts - (data[all_ends - 1] == _NEWLINE) - _cr_before_newline(data, all_ends)
        kept = content > 0
        if table.num_rows != int(kept.sum()):
            kept = self._not_blank(self._lines(chunk, newlines))
        if table.num_rows != int(kept.sum()):
            raise EpochalError(
                f"{self.split.path}: {table.num_rows} records parsed from {int(kept.sum())} lines at byte {self.pos}"
            )
        return one_batch(table), all_ends[kept]

    @staticmethod
    def _not_blank(lines: pa.Array) -> np.ndarray:
        """Which lines hold something besides whitespace (the ones a parser reads a record from)."""
        return pc.greater(pc.utf8_length(pc.utf8_trim_whitespace(lines)), 0).to_numpy(zero_copy_only=False)

    def _without_bad_lines(
        self, chunk: bytes, newlines: np.ndarray, lines: pa.Array, kept: np.ndarray, exc: Exception
    ) -> tuple[pa.Table, np.ndarray]:
        """The chunk's records without the lines that do not parse alone, which are rejected."""
        ends = self._line_ends(chunk, newlines)
        starts = np.concatenate([[0], ends[:-1]])
        good: list[int] = []
        for i, line in enumerate(lines.to_pylist()):
            if not kept[i]:
                continue
            try:
                self._check_line(line)
                good.append(i)
            except (pa.ArrowInvalid, ValueError) as line_exc:
                at = self.pos + int(starts[i])
                if any(seen == at for seen, _ in self._rejects):
                    continue  # met again: the lines after a block's last record are read twice
                error = f"{type(line_exc).__name__}: {line_exc}"
                self._rejects.append((at, RejectedInput(line, error, {"file": self.split.path, "byte": at})))
        if not good:
            return pa.table({}), np.zeros(0, dtype=np.int64)
        try:
            table = self._parse(b"".join(chunk[starts[i] : ends[i]] for i in good))
        except pa.ArrowInvalid as again:  # every line parses alone, not together (types differ)
            where = f"{self.split.path}: the lines from byte {self.pos}"
            raise EpochalError(f"{where} do not parse together: {again}") from exc
        return one_batch(table), ends[good]

    def _parse(self, chunk: bytes) -> pa.Table:
        raise NotImplementedError

    def _check_line(self, line: str) -> None:
        """Raise if one line alone does not parse (to find the line a block's error is about)."""
        self._parse(line.encode() + b"\n")

    def _bad_line(
        self, chunk: bytes, newlines: np.ndarray, lines: pa.Array, kept: np.ndarray, exc: Exception
    ) -> EpochalError:
        """The error for a block that does not parse, naming its first bad line if one is."""
        offsets = np.concatenate([[0], self._line_ends(chunk, newlines)])  # where each line starts
        for i, line in enumerate(lines.to_pylist()):
            if not kept[i]:
                continue
            try:
                self._check_line(line)
            except (pa.ArrowInvalid, ValueError) as line_exc:
                at = self.pos + int(offsets[i])
                return EpochalError(
                    f"{self.split.path}: the line at byte {at} does not parse ({line_exc}): {line[:200]!r}"
                )
        return EpochalError(f"{self.split.path}: the lines from byte {self.pos} do not parse: {exc}")


class _JsonLinesReader(_RecordLineReader):
    def __init__(self, fs: pafs.FileSystem, split: FileSplit, position: int | None, schema: pa.Schema | None) -> None:
        super().__init__(fs, split, position, "utf-8")
        self.options = (
            pjson.ParseOptions(explicit_schema=schema, unexpected_field_behavior="ignore") if schema else None
        )

    def _parse(self, chunk: bytes) -> pa.Table:
        return pjson.read_json(pa.BufferReader(chunk), read_options=_ONE_THREAD_JSON, parse_options=self.options)

    def _check_line(self, line: str) -> None:
        json.loads(line)  # a syntax error names itself; a type conflict is pyarrow's to name
        super()._check_line(line)


class _CsvReader(_RecordLineReader):
    def __init__(
        self, fs: pafs.FileSystem, split: FileSplit, position: int | None, source: CsvSource, names: list[str]
    ) -> None:
        super().__init__(fs, split, position, source.encoding)
        if position is None and split.start == 0 and source.header:
            self.pos = self._next_line_start(0)  # past the header
        self.read_options = pcsv.ReadOptions(column_names=names, encoding=source.encoding, use_threads=False)
        self.parse_options = pcsv.ParseOptions(delimiter=source.delimiter, newlines_in_values=False)
        types = {f.name: f.type for f in source.schema} if source.schema is not None else None
        self.convert_options = pcsv.ConvertOptions(column_types=types)

    def _parse(self, chunk: bytes) -> pa.Table:
        return pcsv.read_csv(
            pa.BufferReader(chunk), read_options=self.read_options, parse_options=self.parse_options,
            convert_options=self.convert_options,
        )


class _RecordFileSource(FileSource):
    """A file source of one record per line, cut into splits by bytes."""

    def __init__(self, path: str | os.PathLike[str], schema: pa.Schema | None, split_size: int, watch: bool | float):
        super().__init__(path, watch)
        self.schema = None if schema is None else check_instance("schema", schema, pa.Schema)
        self.split_size = check_int("split_size", split_size)

    def file_splits(self, info: pafs.FileInfo, name: str) -> Sequence[FileSplit]:
        return byte_splits(info, name, self.split_size)


class JsonLinesSource(_RecordFileSource):
    """JSON objects, one per line, from a file or the files under a directory, as Arrow batches.

    Args:
        path: a file or a directory: a local path or a pyarrow URI (`s3://…`).
        schema: the records' Arrow schema. Without it each block's types are inferred by
            pyarrow, and may differ between blocks (an integer column that a later file has as
            floats); give one for stable types. Fields outside it are ignored.
        split_size: bytes per split.
        watch: follow the directory (`True`: every second; seconds), as `TextFileSource` does.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        schema: pa.Schema | None = None,
        *,
        split_size: int = _DEFAULT_SPLIT,
        watch: bool | float = False,
    ) -> None:
        super().__init__(path, schema, split_size, watch)

    def open_split(self, split: Any, position: Any | None) -> SplitReader:
        return _JsonLinesReader(self.target()[0], split, position, self.schema)


class CsvSource(_RecordFileSource):
    """Rows of CSV files, from a file or the files under a directory, as Arrow batches.

    Args:
        path: a file or a directory: a local path or a pyarrow URI (`s3://…`).
        schema: the columns and their types. Without it, the column names come from each file's
            header and the types are inferred per block (give a schema for stable types).
        header: whether each file starts with a header line (skipped when `schema` names the
            columns).
        delimiter: the field separator.
        encoding: the files' encoding.
        split_size: bytes per split.
        watch: follow the directory (`True`: every second; seconds), as `TextFileSource` does.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        schema: pa.Schema | None = None,
        *,
        header: bool = True,
        delimiter: str = ",",
        encoding: str = "utf-8",
        split_size: int = _DEFAULT_SPLIT,
        watch: bool | float = False,
    ) -> None:
        super().__init__(path, schema, split_size, watch)
        if schema is None and not header:
            raise ValueError("CsvSource: without a header, a schema must name the columns")
        self.header = bool(header)
        self.delimiter = delimiter
        self.encoding = encoding

    def open_split(self, split: Any, position: Any | None) -> SplitReader:
        fs = self.target()[0]
        if self.schema is not None:
            names = self.schema.names
        else:  # the file's own header names the columns, in every split of it
            with fs.open_input_file(split.path) as f:
                first = f.read(min(f.size(), 1024 * 1024)).split(b"\n", 1)[0].rstrip(b"\r")
            names = next(csv.reader([first.decode(self.encoding)], delimiter=self.delimiter), [])
        return _CsvReader(fs, split, position, self, names)


def _cr_before_newline(data: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """1 where a line ends in CR LF (its CR is not content), else 0."""
    has_room = ends >= 2
    before = np.where(has_room, ends - 2, 0)
    return (has_room & (data[ends - 1] == _NEWLINE) & (data[before] == _CR)).astype(np.int64)

