"""A checkpoint data file opened to be read a range at a time (`CheckpointStorage.open_ranged`)."""

from __future__ import annotations

import zlib

import pyarrow as pa

from ..errors import CorruptCheckpointError

READ_CHUNK = 16 << 20  # bytes a `RangedFile` reads at once to check a whole file's CRC-32


class RangedFile:
    """An open data file read a range at a time (`snapshot_files.RangedBytes`); `release` closes it."""

    def __init__(self, f: pa.NativeFile) -> None:
        self._f = f
        self._size: int = f.size()

    def __len__(self) -> int:
        return self._size

    def slice(self, start: int, end: int) -> bytes:
        data: bytes = self._f.read_at(end - start, start)
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
