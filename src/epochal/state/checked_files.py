"""Files under one root on any pyarrow filesystem, written whole and read back verified.

Every file of a checkpoint, data and manifest alike, has a checksum, and a file under its own
name is always whole: `write` writes under a temporary name, computing the file's SHA-256 on the
way, and renames it into place (the manifest's rename is then the commit point of an epoch,
dissertation §4.1.3, which `storage.CheckpointStorage` builds on). `read_file` checks a file's
size and SHA-256 against its handle and is the one place that does; `open_ranged` hands out a
file a range at a time for readers that check each section's own CRC-32 instead. A handle may
name a segment of a merged file (`merged_files`): then both read only the segment's range, and
`read_file` checks the segment's SHA-256.
"""

from __future__ import annotations

import hashlib
import os
import posixpath
import uuid
import zlib
from collections.abc import Iterable
from typing import Any, cast

import pyarrow as pa
import pyarrow.fs as pafs

from ..errors import CheckpointError, CorruptCheckpointError
from .manifest import FileHandle, checkpoint_of_path

READ_CHUNK = 16 << 20  # bytes a `RangedFile` reads at once to check a whole file's CRC-32


def resolve_uri(uri: str) -> tuple[pafs.FileSystem, str]:
    """The filesystem and root path of a local path or a pyarrow URI."""
    if "://" in uri:
        fs, path = pafs.FileSystem.from_uri(uri)
        return fs, path.rstrip("/")
    return pafs.LocalFileSystem(), os.path.abspath(uri)


def chunks_of(data: bytes | Iterable[bytes]) -> Iterable[bytes]:
    """`data` as chunks: one `bytes`, or the iterable as given."""
    return [cast(bytes, data)] if isinstance(data, (bytes, bytearray, memoryview)) else data


class CheckedFiles:
    """Files under `root` of filesystem `fs` (named `uri` in messages), by path relative to it."""

    def __init__(self, uri: str, fs: pafs.FileSystem, root: str) -> None:
        self.uri = uri
        self.fs = fs
        self.root = root

    def _abs(self, relative: str) -> str:
        return posixpath.join(self.root, relative)

    def write(self, relative: str, data: bytes | Iterable[bytes]) -> FileHandle:
        """Write a file under the root atomically: a temporary name, then a rename into place."""
        final = self._abs(relative)
        directory, name = posixpath.split(final)
        tmp = posixpath.join(directory, f".{name}.{uuid.uuid4().hex}.tmp")
        digest, size = hashlib.sha256(), 0
        try:
            try:  # the directory exists for all but a checkpoint's first file: try that first
                stream = self.fs.open_output_stream(tmp)
            except OSError:  # missing parent: FileNotFoundError locally, other kinds elsewhere
                self.fs.create_dir(directory, recursive=True)
                stream = self.fs.open_output_stream(tmp)
            with stream as out:
                for chunk in chunks_of(data):
                    out.write(chunk)
                    digest.update(chunk)
                    size += len(chunk)
            self.fs.move(tmp, final)
        except OSError as exc:
            self._delete_quietly(tmp)
            raise CheckpointError(f"cannot write {relative}: {exc}") from exc
        except BaseException:  # the chunks failed (e.g. a value that does not pickle)
            self._delete_quietly(tmp)
            raise
        return FileHandle(relative, size, digest.hexdigest())

    def read_file(self, handle: FileHandle) -> bytes:
        """Read a data file (or a merged file's segment) and verify its bytes against its handle.

        Raises:
            CorruptCheckpointError: the file is missing, or its size or SHA-256 differs; the
                message names the checkpoint whose directory holds it, and the file.
        """
        if handle.offset is not None:
            ranged = CheckedFiles._open_range(self, handle)
            try:
                data = ranged.slice(0, handle.size)
            finally:
                ranged.release()
        else:
            try:
                with self.fs.open_input_stream(self._abs(handle.path)) as f:
                    data = f.read()
            except OSError as exc:
                where = f"{_checkpoint_label(handle.path)}{handle.label}"
                raise CorruptCheckpointError(f"{where}: missing ({exc})") from exc
        self._verify(handle, len(data), hashlib.sha256(data))
        return data

    def open_ranged(self, handle: FileHandle) -> list[bytes] | RangedFile:
        """The file (or segment) to read a range at a time (`RangedFile`), for a reader that
        wants only some of a keyed-state file's sections and checks each by its own CRC-32
        (`snapshot_files.KeyedFile`): its SHA-256 is not checked, as that reads every byte."""
        return self._open_range(handle)

    def _open_range(self, handle: FileHandle) -> RangedFile:
        try:
            f = self.fs.open_input_file(self._abs(handle.path))
        except OSError as exc:
            raise CorruptCheckpointError(f"{_checkpoint_label(handle.path)}{handle.label}: missing ({exc})") from exc
        start = handle.offset or 0
        if (size := f.size()) < start + handle.size or (handle.offset is None and size != handle.size):
            f.close()
            raise CorruptCheckpointError(
                f"{_checkpoint_label(handle.path)}{handle.label}: the file has {size} bytes, not "
                f"{start + handle.size}{'' if handle.offset is None else ' or more'} (truncated?)")
        return RangedFile(f, start, handle.size)

    @staticmethod
    def _verify(handle: FileHandle, size: int, digest: Any) -> None:
        if size != handle.size or digest.hexdigest() != handle.sha256:
            raise CorruptCheckpointError(
                f"{_checkpoint_label(handle.path)}{handle.label}: checksum mismatch (corrupt or truncated)"
            )

    def has_file(self, relative: str) -> bool:
        return bool(self.fs.get_file_info(self._abs(relative)).type == pafs.FileType.File)

    def delete_file(self, relative: str) -> None:
        self._delete_quietly(self._abs(relative))

    def _delete_quietly(self, path: str) -> None:
        try:
            self.fs.delete_file(path)
        except OSError:
            pass


def _checkpoint_label(path: str) -> str:
    checkpoint_id = checkpoint_of_path(path)
    return "" if checkpoint_id is None else f"checkpoint {checkpoint_id}: "


class RangedFile:
    """An open data file, or the `size` bytes from `start` of one (a merged file's segment), read
    a range at a time (`snapshot_files.RangedBytes`); `release` closes it."""

    def __init__(self, f: pa.NativeFile, start: int = 0, size: int | None = None) -> None:
        self._f = f
        self._start = start
        self._size: int = f.size() - start if size is None else size

    def __len__(self) -> int:
        return self._size

    def slice(self, start: int, end: int) -> bytes:
        data: bytes = self._f.read_at(end - start, self._start + start)
        if len(data) != end - start:
            raise CorruptCheckpointError(f"short read at {start} (truncated?)")
        return data

    def crc(self, end: int) -> int:
        crc = 0
        for start in range(0, end, READ_CHUNK):
            crc = zlib.crc32(self.slice(start, min(end, start + READ_CHUNK)), crc)
        return crc

    def release(self) -> None:
        self._f.close()
