"""TextFileSource: lines of a text file or a directory of text files, replayable by byte offset.

Files are cut into splits of at most `split_size` bytes, so even one large file is read in
parallel; a split owns every line that *starts* inside it (the convention of Hadoop's line
reader). A split's position is the byte offset of its next line, so a restore resumes at exactly
the first line not yet handed out. Lines come out as an Arrow batch with one string column,
`line`: the columnar path keeps them columnar, per-record operators see plain `str`.
"""

from __future__ import annotations

import codecs
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from ..api.connector import Source, SplitReader
from ..config import check_int, check_path
from ..errors import EpochalError

_DEFAULT_SPLIT = 64 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class FileSplit:
    split_id: str
    path: str
    start: int
    end: int  # exclusive: lines starting before this belong to the split


class _LineReader(SplitReader):
    def __init__(self, split: FileSplit, position: int | None, encoding: str) -> None:
        self.split = split
        self.encoding = encoding
        self.file = open(split.path, "rb")
        self.size = os.fstat(self.file.fileno()).st_size
        if position is not None:
            self.pos = position
        elif split.start == 0:
            self.pos = 0
        else:  # skip the line that started in the previous split
            self.file.seek(split.start - 1)
            self.file.readline()
            self.pos = self.file.tell()

    def read(self, max_records: int) -> pa.RecordBatch | None:
        end = min(self.split.end, self.size)
        if self.pos >= end:
            return None
        block = max(64 * 1024, max_records * 64)
        self.file.seek(self.pos)
        data = self.file.read(block)
        while True:
            at_eof = self.pos + len(data) >= self.size
            cut = len(data) if at_eof else data.rfind(b"\n") + 1
            if cut > 0:
                break
            more = self.file.read(block)  # a line longer than the block
            data += more
        chunk = data[:cut]
        if self.pos + len(chunk) > end:  # stop after the line that holds byte end-1
            q = chunk.find(b"\n", end - 1 - self.pos)
            if q != -1:
                chunk = chunk[: q + 1]
        parts = chunk.split(b"\n", max_records)
        if len(parts) > max_records and parts[-1]:  # more lines than asked for: keep the rest
            chunk = chunk[: len(chunk) - len(parts[-1])]
        self.pos += len(chunk)
        lines = chunk.split(b"\n")
        if chunk.endswith(b"\n"):
            lines.pop()
        array = pa.array(lines, pa.binary())
        if self.encoding.replace("-", "").lower() in ("utf8", "ascii"):
            try:
                text = array.cast(pa.string())
            except pa.ArrowInvalid as exc:
                raise EpochalError(f"{self.split.path}: not valid {self.encoding} ({exc})") from exc
        else:
            text = pa.array([line.decode(self.encoding) for line in lines], pa.string())
        text = pc.utf8_rtrim(text, characters="\r")
        return pa.RecordBatch.from_arrays([text], names=["line"])

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


class TextFileSource(Source):
    """Lines of a text file, or of every non-hidden file under a directory (sorted by path).

    Args:
        path: a file or a directory.
        encoding: the files' text encoding.
        split_size: bytes per split; splits are what source subtasks share out.

    Example:
        >>> src = TextFileSource("corpus/")  # doctest: +SKIP
    """

    def __init__(self, path: str | os.PathLike[str], encoding: str = "utf-8", split_size: int = _DEFAULT_SPLIT) -> None:
        self.path = os.path.abspath(check_path("path", path))
        self.encoding = _check_encoding(encoding)
        self.split_size = check_int("split_size", split_size)

    def check(self) -> None:
        """Fail on the driver, before the job starts, if the path is missing or unreadable."""
        if not os.path.exists(self.path):
            raise EpochalError(f"TextFileSource: no such file or directory: {self.path}")
        if not os.access(self.path, os.R_OK | (os.X_OK if os.path.isdir(self.path) else 0)):
            raise EpochalError(f"TextFileSource: cannot read {self.path} (permission denied)")
        self._files()  # neither a file nor a directory (a socket, a device) fails here

    def _files(self) -> list[str]:
        if os.path.isfile(self.path):
            return [self.path]
        if not os.path.isdir(self.path):
            raise EpochalError(f"TextFileSource: {self.path} is neither a file nor a directory")
        files: list[str] = []
        for root, dirs, names in os.walk(self.path):
            dirs[:] = sorted(d for d in dirs if not d.startswith((".", "_")))
            files.extend(os.path.join(root, n) for n in names if not n.startswith((".", "_")))
        return sorted(files)

    def splits(self) -> Sequence[FileSplit]:
        out = []
        for path in self._files():
            size = os.path.getsize(path)
            rel = os.path.relpath(path, os.path.dirname(self.path))
            for start in range(0, max(size, 1), self.split_size):
                out.append(FileSplit(f"{rel}@{start}", path, start, min(start + self.split_size, size)))
        return out

    def open_split(self, split: Any, position: Any | None) -> SplitReader:
        return _LineReader(split, position, self.encoding)
