"""Checkpoint storage: a directory per checkpoint on any pyarrow filesystem, manifest last.

Layout: `<root>/chk-<id:08d>/` holds one file per subtask and operator, then `MANIFEST.json`.
A checkpoint is *complete* iff its manifest exists; the manifest is written last and atomically
(temporary name, then a rename), which is the commit point of the dissertation's epoch commit
(§4.1.3, L3059–3155: the coordinator records the epoch as committed only when every task is
prepared). Every data file's size and SHA-256 are in the manifest, and the manifest carries a
checksum of its own, so a corrupt or truncated checkpoint is detected and never loaded.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import posixpath
import uuid
from dataclasses import asdict, dataclass, field
from typing import Any, Iterable

import pyarrow.fs as pafs

from ..errors import CheckpointError, CorruptCheckpointError, NoCheckpointError

log = logging.getLogger(__name__)

MANIFEST_NAME = "MANIFEST.json"
_CHECKPOINT_PREFIX = "chk-"
_FORMAT_VERSION = 1


@dataclass(frozen=True, slots=True)
class FileHandle:
    """A file of a checkpoint: path relative to the storage root, size, and SHA-256."""

    path: str
    size: int
    sha256: str


@dataclass(frozen=True, slots=True)
class SubtaskState:
    """Where one subtask of one operator left its state."""

    subtask: int
    key_group_start: int
    key_group_end: int
    keyed: FileHandle | None
    operator: FileHandle | None


@dataclass(frozen=True, slots=True)
class OperatorState:
    """The state of every subtask of one operator, named by the operator's stable id."""

    uid: str
    parallelism: int
    max_parallelism: int
    subtasks: tuple[SubtaskState, ...]


@dataclass(frozen=True, slots=True)
class TaskCheckpointStats:
    """What one task's part of a checkpoint cost."""

    task: str
    alignment_ms: float
    sync_ms: float
    async_ms: float
    bytes: int


@dataclass(frozen=True, slots=True)
class Manifest:
    """The commit record of one checkpoint; its presence makes the checkpoint complete."""

    checkpoint_id: int
    job_name: str
    created_at: float
    duration_ms: float
    operators: tuple[OperatorState, ...]
    tasks: tuple[TaskCheckpointStats, ...] = field(default=())
    is_final: bool = False

    @property
    def size(self) -> int:
        return sum(t.bytes for t in self.tasks)

    def operator(self, uid: str) -> OperatorState | None:
        for op in self.operators:
            if op.uid == uid:
                return op
        return None

    def files(self) -> Iterable[FileHandle]:
        for op in self.operators:
            for st in op.subtasks:
                if st.keyed is not None:
                    yield st.keyed
                if st.operator is not None:
                    yield st.operator

    # -- JSON ------------------------------------------------------------------------------------
    def to_json(self) -> bytes:
        body = asdict(self)
        body["format_version"] = _FORMAT_VERSION
        payload = json.dumps(body, sort_keys=True, separators=(",", ":"))
        checksum = hashlib.sha256(payload.encode()).hexdigest()
        return json.dumps({"manifest": body, "sha256": checksum}, sort_keys=True, indent=1).encode()

    @staticmethod
    def from_json(data: bytes, source: str) -> "Manifest":
        try:
            outer = json.loads(data)
            body = outer["manifest"]
            payload = json.dumps(body, sort_keys=True, separators=(",", ":"))
            if hashlib.sha256(payload.encode()).hexdigest() != outer["sha256"]:
                raise CorruptCheckpointError(f"{source}: manifest checksum mismatch")
            if body.pop("format_version") != _FORMAT_VERSION:
                raise CorruptCheckpointError(f"{source}: unknown manifest format")

            def handle(h: dict[str, Any] | None) -> FileHandle | None:
                return None if h is None else FileHandle(**h)

            operators = tuple(
                OperatorState(
                    uid=op["uid"],
                    parallelism=op["parallelism"],
                    max_parallelism=op["max_parallelism"],
                    subtasks=tuple(
                        SubtaskState(
                            subtask=st["subtask"],
                            key_group_start=st["key_group_start"],
                            key_group_end=st["key_group_end"],
                            keyed=handle(st["keyed"]),
                            operator=handle(st["operator"]),
                        )
                        for st in op["subtasks"]
                    ),
                )
                for op in body["operators"]
            )
            return Manifest(
                checkpoint_id=body["checkpoint_id"],
                job_name=body["job_name"],
                created_at=body["created_at"],
                duration_ms=body["duration_ms"],
                operators=operators,
                tasks=tuple(TaskCheckpointStats(**t) for t in body["tasks"]),
                is_final=body["is_final"],
            )
        except CorruptCheckpointError:
            raise
        except Exception as exc:
            raise CorruptCheckpointError(f"{source}: unreadable manifest ({exc})") from exc


def _resolve(uri: str) -> tuple[pafs.FileSystem, str]:
    if "://" in uri:
        fs, path = pafs.FileSystem.from_uri(uri)
        return fs, path.rstrip("/")
    return pafs.LocalFileSystem(), os.path.abspath(uri)


class CheckpointStorage:
    """Reads and writes checkpoints under one root directory (a local path or a pyarrow URI)."""

    def __init__(self, uri: str, create: bool = True) -> None:
        self.uri = uri
        self.fs, self.root = _resolve(uri)
        if not create:
            if self.fs.get_file_info(self.root).type != pafs.FileType.Directory:
                raise NoCheckpointError(f"no checkpoint directory {uri!r}")
            return
        try:
            self.fs.create_dir(self.root, recursive=True)
        except OSError as exc:
            raise CheckpointError(f"cannot create checkpoint directory {uri!r}: {exc}") from exc

    def __reduce__(self) -> tuple[Any, ...]:  # pyarrow filesystems re-resolve in other processes
        return (CheckpointStorage, (self.uri,))

    # -- paths -----------------------------------------------------------------------------------
    @staticmethod
    def checkpoint_dir_name(checkpoint_id: int) -> str:
        return f"{_CHECKPOINT_PREFIX}{checkpoint_id:08d}"

    def _abs(self, relative: str) -> str:
        return posixpath.join(self.root, relative)

    def checkpoint_path(self, checkpoint_id: int) -> str:
        return self._abs(self.checkpoint_dir_name(checkpoint_id))

    # -- writing ---------------------------------------------------------------------------------
    def write_file(self, checkpoint_id: int, name: str, data: bytes) -> FileHandle:
        """Write one data file of checkpoint `checkpoint_id` (not yet visible as complete)."""
        relative = posixpath.join(self.checkpoint_dir_name(checkpoint_id), name)
        try:
            self.fs.create_dir(self.checkpoint_path(checkpoint_id), recursive=True)
            with self.fs.open_output_stream(self._abs(relative)) as out:
                out.write(data)
        except OSError as exc:
            raise CheckpointError(f"cannot write {relative}: {exc}") from exc
        return FileHandle(relative, len(data), hashlib.sha256(data).hexdigest())

    def write_manifest(self, manifest: Manifest) -> None:
        """Complete a checkpoint: the manifest goes last, atomically."""
        directory = self.checkpoint_path(manifest.checkpoint_id)
        tmp = posixpath.join(directory, f".{MANIFEST_NAME}.{uuid.uuid4().hex}.tmp")
        try:
            self.fs.create_dir(directory, recursive=True)
            with self.fs.open_output_stream(tmp) as out:
                out.write(manifest.to_json())
            self.fs.move(tmp, posixpath.join(directory, MANIFEST_NAME))
        except OSError as exc:
            raise CheckpointError(f"cannot write manifest of checkpoint {manifest.checkpoint_id}: {exc}") from exc

    # -- reading ---------------------------------------------------------------------------------
    def read_file(self, handle: FileHandle) -> bytes:
        """Read a data file and verify it against its handle; raises CorruptCheckpointError."""
        try:
            with self.fs.open_input_stream(self._abs(handle.path)) as f:
                data = f.read()
        except (OSError, FileNotFoundError) as exc:
            raise CorruptCheckpointError(f"{handle.path}: missing ({exc})") from exc
        if len(data) != handle.size or hashlib.sha256(data).hexdigest() != handle.sha256:
            raise CorruptCheckpointError(f"{handle.path}: checksum mismatch (corrupt or truncated)")
        return data

    def checkpoint_ids(self) -> list[int]:
        """Ids of every checkpoint directory, complete or not, ascending."""
        try:
            infos = self.fs.get_file_info(pafs.FileSelector(self.root, allow_not_found=True))
        except OSError as exc:
            raise CheckpointError(f"cannot list {self.uri!r}: {exc}") from exc
        ids = []
        for info in infos:
            name = info.base_name
            if info.type == pafs.FileType.Directory and name.startswith(_CHECKPOINT_PREFIX):
                suffix = name[len(_CHECKPOINT_PREFIX) :]
                if suffix.isdigit():
                    ids.append(int(suffix))
        return sorted(ids)

    def has_manifest(self, checkpoint_id: int) -> bool:
        info = self.fs.get_file_info(posixpath.join(self.checkpoint_path(checkpoint_id), MANIFEST_NAME))
        return info.type == pafs.FileType.File

    def load_manifest(self, checkpoint_id: int) -> Manifest:
        path = posixpath.join(self.checkpoint_path(checkpoint_id), MANIFEST_NAME)
        try:
            with self.fs.open_input_stream(path) as f:
                data = f.read()
        except (OSError, FileNotFoundError) as exc:
            raise NoCheckpointError(f"checkpoint {checkpoint_id} is not complete in {self.uri!r}") from exc
        return Manifest.from_json(data, source=path)

    def verify(self, manifest: Manifest) -> None:
        """Check every file of a checkpoint; raises CorruptCheckpointError on the first bad one."""
        for handle in manifest.files():
            self.read_file(handle)

    def complete_checkpoints(self) -> list[int]:
        return [cid for cid in self.checkpoint_ids() if self.has_manifest(cid)]

    def latest(self) -> Manifest | None:
        """The newest complete checkpoint that verifies; corrupt ones are logged and skipped."""
        for checkpoint_id in reversed(self.complete_checkpoints()):
            try:
                manifest = self.load_manifest(checkpoint_id)
                self.verify(manifest)
                return manifest
            except CorruptCheckpointError as exc:
                log.warning("skipping corrupt checkpoint %d: %s", checkpoint_id, exc)
        return None

    def resolve(self, which: str | int) -> Manifest:
        """A verified manifest for `"latest"`, a checkpoint id, or a `chk-…` directory path."""
        if which == "latest":
            manifest = self.latest()
            if manifest is None:
                raise NoCheckpointError(f"no complete checkpoint in {self.uri!r}")
            return manifest
        if isinstance(which, str) and which.isdigit():
            which = int(which)
        if isinstance(which, str):
            path = which.rstrip("/")
            base = posixpath.basename(path)
            if not base.startswith(_CHECKPOINT_PREFIX) or not base[len(_CHECKPOINT_PREFIX) :].isdigit():
                raise NoCheckpointError(f"{which!r} is not a checkpoint directory (chk-NNNNNNNN)")
            parent = posixpath.dirname(path)
            if parent and "://" not in path and os.path.abspath(parent) != self.root:
                raise NoCheckpointError(
                    f"{which!r} is not in the job's checkpoint directory {self.uri!r}; "
                    "set CheckpointConfig(directory=...) (or --checkpoint-dir) to its parent"
                )
            which = int(base[len(_CHECKPOINT_PREFIX) :])
        manifest = self.load_manifest(which)
        self.verify(manifest)
        return manifest

    # -- retention -------------------------------------------------------------------------------
    def discard(self, checkpoint_id: int) -> None:
        try:
            self.fs.delete_dir(self.checkpoint_path(checkpoint_id))
        except (OSError, FileNotFoundError):
            pass

    def retain(self, keep: int, newest_complete: int) -> None:
        """Keep the newest `keep` complete checkpoints; drop older ones and older incomplete ones."""
        complete = self.complete_checkpoints()
        kept = set(complete[-keep:]) if keep > 0 else set()
        for checkpoint_id in self.checkpoint_ids():
            if checkpoint_id < newest_complete and checkpoint_id not in kept:
                self.discard(checkpoint_id)
