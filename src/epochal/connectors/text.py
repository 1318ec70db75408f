"""TextFileSource: lines of a text file or a directory of text files, replayable by byte offset.

Files are cut into splits of at most `split_size` bytes, so even one large file is read in
parallel; a split owns every line that *starts* inside it (the convention of Hadoop's line
reader). A split's position is the byte offset of its next line, so a restore resumes at exactly
the first line not yet handed out. Lines come out as an Arrow batch with one string column,
`line`: the columnar path keeps them columnar, per-record operators see plain `str`. No Python
object is made per line: a block of lines becomes one string array over the block's bytes
(UTF-8, the default; other encodings decode line by line), and batches are slices of it.
"""

from __future__ import annotations

import codecs
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs

from ..api.connector import SplitReader
from ..errors import EpochalError
from ..validation import check_int
from .file_source import FileSource

_DEFAULT_SPLIT = 64 * 1024 * 1024
_NEWLINE = ord("\n")
_BLOCK = 1024 * 1024  # bytes decoded at once


@dataclass(frozen=True, slots=True)
class FileSplit:
    split_id: str
    path: str
    start: int
    end: int  # exclusive: lines starting before this belong to the split


class _LineReader(SplitReader):
    """Reads a block of lines at a time and hands out slices of it.

    A block (about `_BLOCK` bytes, whole lines) is decoded at once: newlines found by numpy, one
    string array over the block's bytes, UTF-8 checked and carriage returns trimmed in single
    kernels; each `read` is then a zero-copy slice. The position is the byte offset just past
    the last line handed out, so a restore rereads from the first line not yet handed out.
    """

    def __init__(self, fs: pafs.FileSystem, split: FileSplit, position: int | None, encoding: str) -> None:
        self.split = split
        self.encoding = encoding
        self.file = fs.open_input_file(split.path)
        self.size = self.file.size()
        if position is not None:
            self.pos = position
        elif split.start == 0:
            self.pos = 0
        else:  # skip the line that started in the previous split
            self.pos = self._next_line_start(split.start - 1)
        # decoded, not yet handed out (`pa.nulls`: `pa.array` of a list would import pandas, 0.4-0.7 s)
        self._block: pa.Array | pa.Table = pa.nulls(0, pa.string())
        self._ends = np.zeros(0, dtype=np.int64)  # each of those lines' end, as a file offset
        self._next = 0

    def _next_line_start(self, offset: int) -> int:
        """Where the first line that starts after `offset` starts (the file's end if none)."""
        self.file.seek(offset)
        while offset < self.size:
            chunk = self.file.read(64 * 1024)
            newline = chunk.find(b"\n")
            if newline != -1:
                return offset + newline + 1
            offset += len(chunk)
        return self.size

    def read(self, max_records: int) -> pa.RecordBatch | None:
        if self._next >= len(self._block) and not self._fill():
            return None
        n = min(max_records, len(self._block) - self._next)
        rows = self._block.slice(self._next, n)
        self._next += n
        self.pos = int(self._ends[self._next - 1])
        return self._batch(rows)

    def _batch(self, rows: Any) -> pa.RecordBatch:
        """A slice of the block as the batch `read` returns."""
        return pa.RecordBatch.from_arrays([rows], names=["line"])

    def _decode(self, chunk: bytes, newlines: np.ndarray) -> tuple[pa.Array | pa.Table, np.ndarray]:
        """A chunk of whole lines as the block of records `read` slices, and each record's end
        (a file offset relative to the chunk): one line each, here."""
        return self._lines(chunk, newlines), self._line_ends(chunk, newlines)

    def _fill(self) -> bool:
        """Decode the next block of whole lines from `pos`; False at the split's end."""
        end = min(self.split.end, self.size)
        if self.pos >= end:
            return False
        self.file.seek(self.pos)
        data = self.file.read(_BLOCK)
        while True:
            at_eof = self.pos + len(data) >= self.size
            cut = len(data) if at_eof else data.rfind(b"\n") + 1
            if cut > 0:
                break
            data += self.file.read(_BLOCK)  # a line longer than the block
        chunk = data[:cut]
        if self.pos + len(chunk) > end:  # stop after the line that holds byte end-1
            q = chunk.find(b"\n", end - 1 - self.pos)
            if q != -1:
                chunk = chunk[: q + 1]
        newlines = np.flatnonzero(np.frombuffer(chunk, dtype=np.uint8) == _NEWLINE)
        block, ends = self._decode(chunk, newlines)
        self._block, self._ends, self._next = block, ends + self.pos, 0
        if len(block) == 0:  # a chunk of blank lines: skip it, and say where the split stands
            self.pos += len(chunk)
            return self._fill()
        return True

    @staticmethod
    def _line_ends(chunk: bytes, newlines: np.ndarray) -> np.ndarray:
        """Each line's end in the chunk: just past its newline (or the chunk's end, for a last
        line without one)."""
        ends = newlines.astype(np.int64) + 1
        return ends if chunk.endswith(b"\n") else np.append(ends, len(chunk))

    def _lines(self, chunk: bytes, newlines: np.ndarray) -> pa.Array:
        """The chunk's lines as one string array over the chunk's own bytes: the offsets are the
        newlines' positions, so no Python object is made per line (a line ends at its newline,
        which, with a trailing carriage return, is then trimmed in one kernel)."""
        ends = self._line_ends(chunk, newlines)
        offsets = np.zeros(len(ends) + 1, dtype=np.int32 if len(chunk) < 2**31 else np.int64)
        offsets[1:] = ends
        if self.encoding.replace("-", "").lower() in ("utf8", "ascii"):
            kind = pa.string() if offsets.dtype == np.int32 else pa.large_string()
            text = pa.Array.from_buffers(kind, len(ends), [None, pa.py_buffer(offsets), pa.py_buffer(chunk)])
            try:
                text.validate(full=True)  # UTF-8, checked in C
            except pa.ArrowInvalid as exc:
                raise EpochalError(f"{self.split.path}: not valid {self.encoding} ({exc})") from exc
        else:
            text = pa.array([chunk[a:b].decode(self.encoding) for a, b in zip(offsets[:-1], offsets[1:])], pa.string())
        return pc.utf8_rtrim(text, characters="\r\n")

    def position(self) -> int:
        return self.pos

    def close(self) -> None:
        self.file.close()


def _check_encoding(encoding: object) -> str:
    if not isinstance(encoding, str):
        raise TypeError(f"encoding must be a codec name (str), got {encoding!r} ({type(encoding).__name__})")
    try:
        codecs.lookup(encoding)
    except LookupError:
        raise ValueError(f"encoding must be a known codec, got {encoding!r}") from None
    return encoding


class TextFileSource(FileSource):
    """Lines of a text file, or of every file under a directory (sorted by path); names that
    start with `.` or `_` are skipped, as Spark and Hadoop skip them.

    Args:
        path: a file or a directory: a local path, or a URI of any filesystem pyarrow knows
            (`s3://bucket/prefix`, `gs://…`, `hdfs://…`; options such as an endpoint go in its
            query string, credentials come from the usual environment or the URI).
        encoding: the files' text encoding.
        split_size: bytes per split; splits are what source subtasks share out.
        watch: follow the directory: `True` lists it every second, a number every that many
            seconds, and each file that appears is read once, exactly once across failures
            (the job then runs until cancelled). A file must be complete when it appears under
            its name: write it elsewhere (or under a name starting with `.` or `_`) and rename
            it in. A file that grows or changes after it was found is not read again.

    Example:
        >>> src = TextFileSource("corpus/")  # doctest: +SKIP
        >>> inbox = TextFileSource("landing/", watch=5.0)  # doctest: +SKIP
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        encoding: str = "utf-8",
        split_size: int = _DEFAULT_SPLIT,
        watch: bool | float = False,
    ) -> None:
        super().__init__(path, watch)
        self.encoding = _check_encoding(encoding)
        self.split_size = check_int("split_size", split_size)

    def file_splits(self, info: pafs.FileInfo, name: str) -> Sequence[FileSplit]:
        return byte_splits(info, name, self.split_size)

    def open_split(self, split: Any, position: Any | None) -> SplitReader:
        return _LineReader(self.target()[0], split, position, self.encoding)


def byte_splits(info: pafs.FileInfo, name: str, split_size: int) -> list[FileSplit]:
    """A file of lines cut every `split_size` bytes (one split for an empty file)."""
    size = info.size or 0
    return [
        FileSplit(f"{name}@{start}", info.path, start, min(start + split_size, size))
        for start in range(0, max(size, 1), split_size)
    ]
