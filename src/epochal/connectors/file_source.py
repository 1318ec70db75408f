"""What every file source shares: a path on any pyarrow filesystem, its listing, and watching.

A file source reads a file, or every file under a directory, sorted by path; names that start
with `.` or `_` (a staging file, `_SUCCESS`, `_spark_metadata`) are skipped, as Spark and Hadoop
skip them. With `watch`, the job master lists the directory every interval and hands the new
files' splits to the source subtasks (`runtime.master.enumerator`), exactly once across failures.
A split id starts with the file's path relative to the root's parent, so ids are stable across
runs, hosts and filesystems.
"""

from __future__ import annotations

import os
import posixpath
from abc import abstractmethod
from collections.abc import Sequence
from typing import Any

import pyarrow.fs as pafs

from ..api.connector import Source, SourceSplit
from ..errors import EpochalError
from ..state.checked_files import resolve_uri
from ..validation import check_path, check_seconds

__all__ = ["FileSource", "check_watch"]


def check_watch(watch: object) -> float | None:
    """`watch` as a listing interval in seconds (`True`: 1 s), or None for a fixed set of files."""
    if watch is False:
        return None
    if watch is True:
        return 1.0
    return check_seconds("watch", watch)


def _hidden(relative: str) -> bool:
    """Whether a path below the root has a part that starts with `.` or `_`."""
    return any(part.startswith((".", "_")) for part in relative.split("/") if part)


class FileSource(Source):
    """A source over the files under `path` (a local path or a pyarrow URI); subclasses cut a
    file into splits and read them."""

    def __init__(self, path: str | os.PathLike[str], watch: bool | float) -> None:
        path = check_path("path", path)
        self.path = path if "://" in path else os.path.abspath(path)
        self.watch = check_watch(watch)
        self._target: tuple[pafs.FileSystem, str] | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_target": None}  # a filesystem is resolved in each process

    @property
    def kind(self) -> str:
        return type(self).__name__

    def target(self) -> tuple[pafs.FileSystem, str]:
        """The filesystem, and the path within it."""
        if self._target is None:
            self._target = resolve_uri(self.path)
        return self._target

    def discovery_interval(self) -> float | None:
        return self.watch

    def check(self) -> None:
        """Fail on the driver, before the job starts, if the path is missing or unreadable."""
        fs, root = self.target()
        try:
            kind = fs.get_file_info(root).type
        except OSError as exc:
            raise EpochalError(f"{self.kind}: cannot read {self.path}: {exc}") from exc
        if kind is pafs.FileType.NotFound:
            raise EpochalError(f"{self.kind}: no such file or directory: {self.path}")
        local = isinstance(fs, pafs.LocalFileSystem)
        if local and not os.access(root, os.R_OK | (os.X_OK if os.path.isdir(root) else 0)):
            raise EpochalError(f"{self.kind}: cannot read {self.path} (permission denied)")
        if self.watch is not None and kind is not pafs.FileType.Directory:
            raise EpochalError(f"{self.kind}: watch needs a directory, and {self.path} is not one")
        if local and not (os.path.isfile(root) or os.path.isdir(root)):  # a socket, a device
            raise EpochalError(f"{self.kind}: {self.path} is neither a file nor a directory")
        self.files()

    def files(self) -> list[pafs.FileInfo]:
        """The files to read, sorted by path."""
        fs, root = self.target()
        info = fs.get_file_info(root)
        if info.type is pafs.FileType.File:
            return [info]
        if info.type is not pafs.FileType.Directory:
            raise EpochalError(f"{self.kind}: {self.path} is neither a file nor a directory")
        found = fs.get_file_info(pafs.FileSelector(root, recursive=True))
        return sorted(
            (f for f in found if f.type is pafs.FileType.File and not _hidden(f.path[len(root) :])),
            key=lambda f: f.path,
        )

    def splits(self) -> Sequence[SourceSplit]:
        _, root = self.target()
        base = posixpath.dirname(root.rstrip("/"))
        out: list[SourceSplit] = []
        for info in self.files():
            out.extend(self.file_splits(info, info.path[len(base) :].lstrip("/")))
        return out

    @abstractmethod
    def file_splits(self, info: pafs.FileInfo, name: str) -> Sequence[SourceSplit]:
        """The splits of one file; `name` (its path below the root's parent) starts each id."""
