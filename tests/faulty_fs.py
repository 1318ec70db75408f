"""A local filesystem that fails on cue, for storage-fault tests: a real `pyarrow.fs` filesystem
(`PyFileSystem` over a handler) given to `CheckpointConfig(filesystem=...)`, so Epochal's own
code runs unchanged and meets the faults where a real store would put them.

Faults are armed per test in `FAULTS` (this process: in-process runs), each for paths that
contain a pattern and for a number of times:
- `fail`: opening a file for writing raises OSError (a store that refuses writes);
- `full`: a write raises OSError ENOSPC (a store that fills up);
- `slow`: opening a file for writing sleeps first (a store slower than the checkpoint timeout);
- `flip`: a read returns the file with one bit flipped (corruption after the file was written).
"""

from __future__ import annotations

import errno
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs


@dataclass
class Fault:
    kind: str
    pattern: str
    times: int
    seconds: float = 0.0
    hits: list[str] = field(default_factory=list)  # the paths it struck


class Faults:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.armed: list[Fault] = []

    def arm(self, kind: str, pattern: str, times: int = 1, seconds: float = 0.0) -> Fault:
        fault = Fault(kind, pattern, times, seconds)
        with self._lock:
            self.armed.append(fault)
        return fault

    def clear(self) -> None:
        with self._lock:
            self.armed.clear()

    def strike(self, kind: str, path: str) -> Fault | None:
        """The armed fault of `kind` for `path`, used up once; None if there is none."""
        with self._lock:
            for fault in self.armed:
                if fault.kind == kind and fault.pattern in path and fault.times > 0:
                    fault.times -= 1
                    fault.hits.append(path)
                    return fault
        return None


FAULTS = Faults()


class _FullStream:
    """A write stream on a full disk."""

    closed = False

    def write(self, data: Any) -> int:
        raise OSError(errno.ENOSPC, "No space left on device (injected)")

    def flush(self) -> None:
        pass

    def close(self) -> None:
        self.closed = True


class FaultyHandler(pafs.FileSystemHandler):
    """The local filesystem, with `FAULTS` applied."""

    def __init__(self) -> None:
        self.fs = pafs.LocalFileSystem()

    def __reduce__(self) -> tuple[Any, ...]:
        return (FaultyHandler, ())

    def __eq__(self, other: object) -> bool:
        return isinstance(other, FaultyHandler)

    def __hash__(self) -> int:
        return hash(FaultyHandler)

    def get_type_name(self) -> str:
        return "faulty"

    def normalize_path(self, path: str) -> str:
        return path

    def equals(self, other: Any) -> bool:
        return isinstance(other, FaultyHandler)

    def get_file_info(self, paths: list[str]) -> list[pafs.FileInfo]:
        return self.fs.get_file_info(paths)

    def get_file_info_selector(self, selector: pafs.FileSelector) -> list[pafs.FileInfo]:
        return self.fs.get_file_info(selector)

    def create_dir(self, path: str, recursive: bool) -> None:
        self.fs.create_dir(path, recursive=recursive)

    def delete_dir(self, path: str) -> None:
        self.fs.delete_dir(path)

    def delete_dir_contents(self, path: str, missing_dir_ok: bool = False) -> None:
        self.fs.delete_dir_contents(path, missing_dir_ok=missing_dir_ok)

    def delete_root_dir_contents(self) -> None:
        raise OSError("not on the root")

    def delete_file(self, path: str) -> None:
        self.fs.delete_file(path)

    def move(self, src: str, dest: str) -> None:
        self.fs.move(src, dest)

    def copy_file(self, src: str, dest: str) -> None:
        self.fs.copy_file(src, dest)

    def open_input_stream(self, path: str) -> pa.NativeFile:
        if FAULTS.strike("flip", path) is not None:
            with self.fs.open_input_stream(path) as f:
                data = bytearray(f.read())
            data[len(data) // 2] ^= 0x10
            return pa.BufferReader(bytes(data))
        return self.fs.open_input_stream(path)

    def open_input_file(self, path: str) -> pa.NativeFile:
        return self.fs.open_input_file(path)

    def open_output_stream(self, path: str, metadata: Any = None) -> pa.NativeFile:
        if (fault := FAULTS.strike("slow", path)) is not None:
            time.sleep(fault.seconds)
        if FAULTS.strike("fail", path) is not None:
            raise OSError(errno.EIO, f"Input/output error (injected) writing {path}")
        if FAULTS.strike("full", path) is not None:
            return pa.PythonFile(_FullStream(), mode="w")
        return self.fs.open_output_stream(path, metadata=metadata)

    def open_append_stream(self, path: str, metadata: Any = None) -> pa.NativeFile:
        return self.fs.open_append_stream(path, metadata=metadata)


def faulty_filesystem() -> pafs.FileSystem:
    return pafs.PyFileSystem(FaultyHandler())
