"""Merged checkpoint files: a worker's subtasks write one file per checkpoint, as segments.

Flink's file merging (FLIP-306): a job of p subtasks with k stateful operators wrote about p*k
files per checkpoint, one per subtask and operator, which an object store charges one request
each for (a PUT, a HEAD to check it, a DELETE when retention drops it) and which a file system's
metadata server must create and list. Merged, a worker (a Spark worker, or the in-process host)
writes one file per checkpoint holding every file of its subtasks as a *segment*
(`FileHandle.offset`): the store sees one PUT per worker and checkpoint.

Nothing is held in memory to merge: a segment streams into the open file chunk by chunk as its
subtask's snapshot is serialised, and the file, written under a temporary name, is renamed into
place when the worker's last subtask of the checkpoint has written (`runtime.task.file_merging`
decides when). Checksums stay per segment (the handle's SHA-256, checked by whoever reads it,
`checked_files`) and per file (the merged file's own handle, which the manifest lists in
`Manifest.merged`), and the manifest is still written last, atomically. Segments are read
with ranged reads, so a live migration's new owner still reads only the key groups it takes.

Retention counts files by path (`retention`): a merged file stays while any retained manifest
references any of its segments (an incremental chain's oldest file keeps its whole merged file).
"""

from __future__ import annotations

import hashlib
import posixpath
import uuid
from collections.abc import Iterable
from typing import Any

from ..errors import CheckpointError
from .checked_files import CheckedFiles, chunks_of
from .manifest import FileHandle

MERGED_SUFFIX = ".merged"


def merged_name(owner: str) -> str:
    """The name of a merged file in its checkpoint's directory: the writer, and a random part
    (two processes never write the same name, even across restarts of one worker)."""
    return f"{owner}-{uuid.uuid4().hex[:8]}{MERGED_SUFFIX}"


class MergedFileWriter:
    """One merged file being written: `append` segments, then `close` (or `abort`).

    Not thread-safe: one thread appends and closes (a worker's snapshot thread, or the
    in-process host's thread)."""

    def __init__(self, files: CheckedFiles, relative: str) -> None:
        self.files = files
        self.relative = relative
        self._final = files._abs(relative)
        directory, name = posixpath.split(self._final)
        self._directory = directory
        self._tmp = posixpath.join(directory, f".{name}.{uuid.uuid4().hex}.tmp")
        self._out: Any = None
        self._digest = hashlib.sha256()
        self.size = 0
        self.segments = 0
        self._failed: str | None = None  # why the file was given up: later segments fail too

    def _open(self) -> Any:
        fs = self.files.fs
        try:
            try:
                return fs.open_output_stream(self._tmp)
            except OSError:  # the checkpoint's directory does not exist yet
                fs.create_dir(self._directory, recursive=True)
                return fs.open_output_stream(self._tmp)
        except OSError as exc:
            raise CheckpointError(f"cannot write {self.relative}: {exc}") from exc

    def append(self, data: bytes | Iterable[bytes]) -> FileHandle:
        """Write one segment; returns its handle (valid once the file is closed)."""
        if self._failed is not None:
            raise CheckpointError(f"{self.relative} was given up: {self._failed}")
        if self._out is None:
            self._out = self._open()
        start, digest = self.size, hashlib.sha256()
        try:
            for chunk in chunks_of(data):
                self._out.write(chunk)
                digest.update(chunk)
                self._digest.update(chunk)
                self.size += len(chunk)
        except OSError as exc:
            self.abort(str(exc))
            raise CheckpointError(f"cannot write {self.relative}: {exc}") from exc
        except BaseException as exc:  # the chunks failed (a value that does not pickle): the file is spoilt
            self.abort(f"a segment failed ({exc})")
            raise
        self.segments += 1
        return FileHandle(self.relative, self.size - start, digest.hexdigest(), start)

    @property
    def is_open(self) -> bool:
        return self._out is not None

    def close(self) -> FileHandle:
        """Finish the file and rename it into place; returns the whole file's handle."""
        if self._out is None:
            raise CheckpointError(f"{self.relative}: a merged file without segments")
        fs = self.files.fs
        try:
            self._out.close()
            self._out = None
            fs.move(self._tmp, self._final)
        except OSError as exc:
            self.abort(str(exc))
            raise CheckpointError(f"cannot write {self.relative}: {exc}") from exc
        return FileHandle(self.relative, self.size, self._digest.hexdigest())

    def abort(self, reason: str = "aborted") -> None:
        """Give the file up: nothing of it is ever visible under its name."""
        self._failed = self._failed or reason
        out, self._out = self._out, None
        if out is not None:
            try:
                out.close()
            except OSError:
                pass
        self.files._delete_quietly(self._tmp)
