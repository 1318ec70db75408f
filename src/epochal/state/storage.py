"""Checkpoint storage: a directory per checkpoint on any pyarrow filesystem, manifest last.

Layout: `<root>/chk-<id:08d>/` holds one file per subtask and operator, then `MANIFEST.json`.
A checkpoint is *complete* iff its manifest exists; the manifest is written last and atomically
(temporary name, then a rename), which is the commit point of the dissertation's epoch commit
(§4.1.3, L3059–3155: the coordinator records the epoch as committed only when every task is
prepared). Every data file's size and SHA-256 are in the manifest, and the manifest carries a
checksum of its own, so a corrupt or truncated checkpoint is detected and never loaded.

Incremental checkpoints make files *shared*: a subtask's keyed state is a chain (a full file,
then deltas) whose earlier files live in the directories of earlier checkpoints. Retention
therefore counts references: a checkpoint that falls out of retention loses its manifest at
once, but a file of its directory survives as long as a retained manifest still lists it.

A *savepoint* is a complete checkpoint copied, with every file of its chains, into a directory
the user owns (`create_savepoint`): self-contained, never touched by retention, and restorable
by any job whose operators carry the same uids.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import posixpath
import uuid
from dataclasses import dataclass, field, fields, is_dataclass, replace
from typing import Any, Iterable

import pyarrow.fs as pafs

from ..errors import CheckpointError, CorruptCheckpointError, NoCheckpointError

log = logging.getLogger(__name__)

MANIFEST_NAME = "MANIFEST.json"
_CHECKPOINT_PREFIX = "chk-"
_FORMAT_VERSION = 2
_READABLE_VERSIONS = (1, 2)  # 1: one keyed file per subtask, no chains


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
    keyed_base: tuple[FileHandle, ...] = ()  # earlier files of the chain, full file first

    def keyed_chain(self) -> tuple[FileHandle, ...]:
        """Every file of this subtask's keyed state, in the order a restore applies them."""
        return self.keyed_base + ((self.keyed,) if self.keyed is not None else ())


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


def _plain(value: Any) -> Any:
    """`dataclasses.asdict` for the manifest's types, without its deep copy of every leaf."""
    if isinstance(value, (tuple, list)):
        return [_plain(v) for v in value]
    if is_dataclass(value):
        return {f.name: _plain(getattr(value, f.name)) for f in fields(value)}
    return value


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
    is_savepoint: bool = False
    # where this manifest was read from (a storage root URI); not part of the JSON
    location: str = field(default="", compare=False)

    @property
    def size(self) -> int:
        return sum(t.bytes for t in self.tasks)

    def operator(self, uid: str) -> OperatorState | None:
        for op in self.operators:
            if op.uid == uid:
                return op
        return None

    def files(self) -> Iterable[FileHandle]:
        seen: set[str] = set()
        for op in self.operators:
            for st in op.subtasks:
                for handle in (*st.keyed_chain(), st.operator):
                    if handle is not None and handle.path not in seen:
                        seen.add(handle.path)
                        yield handle

    def written_size(self) -> int:
        """Bytes of the files that live in this checkpoint's own directory (new in it)."""
        own = f"{_CHECKPOINT_PREFIX}{self.checkpoint_id:08d}/"
        return sum(h.size for h in self.files() if h.path.startswith(own))

    def full_size(self) -> int:
        """Bytes of every file a restore of this checkpoint reads."""
        return sum(h.size for h in self.files())

    # -- JSON ------------------------------------------------------------------------------------
    def to_json(self) -> bytes:
        """The manifest and its checksum, as compact JSON (`python -m json.tool` pretty-prints).

        Written once per checkpoint by the coordinator: `dataclasses.asdict` and an indented
        dump (which takes the pure-Python encoder) were about 2 ms of it under cProfile.
        """
        body = _plain(self)
        del body["location"]
        body["format_version"] = _FORMAT_VERSION
        payload = json.dumps(body, sort_keys=True, separators=(",", ":"))
        checksum = hashlib.sha256(payload.encode()).hexdigest()
        return f'{{"manifest":{payload},"sha256":"{checksum}"}}'.encode()

    @staticmethod
    def from_json(data: bytes, source: str) -> "Manifest":
        try:
            outer = json.loads(data)
            body = outer["manifest"]
            payload = json.dumps(body, sort_keys=True, separators=(",", ":"))
            if hashlib.sha256(payload.encode()).hexdigest() != outer["sha256"]:
                raise CorruptCheckpointError(f"{source}: manifest checksum mismatch")
            if body.pop("format_version") not in _READABLE_VERSIONS:
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
                            keyed_base=tuple(FileHandle(**h) for h in st.get("keyed_base", ())),
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
                is_savepoint=body.get("is_savepoint", False),
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
    def write_file(self, checkpoint_id: int, name: str, data: bytes | Iterable[bytes]) -> FileHandle:
        """Write one data file of checkpoint `checkpoint_id` (not yet visible as complete).

        `data` may be an iterable of chunks, so a large file is never one `bytes` in memory.
        """
        relative = posixpath.join(self.checkpoint_dir_name(checkpoint_id), name)
        return self._write(relative, [data] if isinstance(data, (bytes, bytearray, memoryview)) else data)

    def _write(self, relative: str, chunks: Iterable[bytes]) -> FileHandle:
        digest, size = hashlib.sha256(), 0
        path = self._abs(relative)
        try:
            try:  # the directory exists for all but a checkpoint's first file: try that first
                stream = self.fs.open_output_stream(path)
            except OSError:  # missing parent: FileNotFoundError locally, other kinds elsewhere
                self.fs.create_dir(posixpath.dirname(path), recursive=True)
                stream = self.fs.open_output_stream(path)
            with stream as out:
                for chunk in chunks:
                    out.write(chunk)
                    digest.update(chunk)
                    size += len(chunk)
        except OSError as exc:
            raise CheckpointError(f"cannot write {relative}: {exc}") from exc
        return FileHandle(relative, size, digest.hexdigest())

    def write_manifest(self, manifest: Manifest) -> None:
        """Complete a checkpoint: the manifest goes last, atomically."""
        directory = self.checkpoint_path(manifest.checkpoint_id)
        self._check_shared_files(manifest)
        tmp = posixpath.join(directory, f".{MANIFEST_NAME}.{uuid.uuid4().hex}.tmp")
        try:
            self.fs.create_dir(directory, recursive=True)
            with self.fs.open_output_stream(tmp) as out:
                out.write(manifest.to_json())
            self.fs.move(tmp, posixpath.join(directory, MANIFEST_NAME))
        except OSError as exc:
            raise CheckpointError(f"cannot write manifest of checkpoint {manifest.checkpoint_id}: {exc}") from exc

    def _check_shared_files(self, manifest: Manifest) -> None:
        """Refuse to complete a checkpoint whose chains reference a file that is gone.

        A subtask builds its delta on the last checkpoint it *heard* complete; if retention
        dropped that checkpoint's files meanwhile (a late notification, `retain=1`), the new
        checkpoint would be unrestorable. It fails instead, and the job's next one is whole.
        """
        own = self.checkpoint_dir_name(manifest.checkpoint_id) + "/"
        shared = [self._abs(h.path) for h in manifest.files() if not h.path.startswith(own)]
        if not shared:
            return
        try:
            infos = self.fs.get_file_info(shared)
        except OSError as exc:
            raise CheckpointError(f"cannot check the shared files of checkpoint {manifest.checkpoint_id}: {exc}") from exc
        missing = [i.path for i in infos if i.type != pafs.FileType.File]
        if missing:
            raise CheckpointError(
                f"checkpoint {manifest.checkpoint_id} references files that retention removed: {missing[:3]}"
            )

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
        return replace(Manifest.from_json(data, source=path), location=self.uri)

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

    def resolve(self, which: str | int, *, verify: bool = True) -> Manifest:
        """A verified manifest for `"latest"`, a checkpoint id, a `chk-…` directory path, or the
        directory of a savepoint (which may lie anywhere: it is self-contained, and is adopted
        as this storage's next checkpoint, see `adopt`)."""
        if isinstance(which, str) and which != "latest" and not which.isdigit():
            savepoint = load_savepoint(which, verify=verify)
            if savepoint is not None:
                # copied in as this storage's next checkpoint: checkpoint ids go on from it, and
                # the job never reads (or deletes) anything in the user's directory again
                return self.adopt(savepoint) if verify else savepoint
        if which == "latest":
            manifest = self.latest() if verify else self._newest_loadable()
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
                    "set CheckpointConfig(directory=...) (or --checkpoint-dir) to its parent, or take a "
                    "savepoint of it (epochal savepoint) and start from that"
                )
            which = int(base[len(_CHECKPOINT_PREFIX) :])
        manifest = self.load_manifest(which)
        if verify:
            self.verify(manifest)
        return manifest

    def _newest_loadable(self) -> Manifest | None:
        for checkpoint_id in reversed(self.complete_checkpoints()):
            try:
                return self.load_manifest(checkpoint_id)
            except CorruptCheckpointError:
                continue
        return None

    def adopt(self, manifest: Manifest) -> Manifest:
        """Copy a checkpoint from elsewhere (a savepoint) in as this storage's next checkpoint.

        Hosts whose workers load the manifest by id from the job's own storage (Spark) start
        from the adopted copy; its files are then the first base of the job's chains.
        """
        source = storage_for(manifest, None)
        checkpoint_id = max(self.checkpoint_ids(), default=0) + 1
        prefix = self.checkpoint_dir_name(checkpoint_id) + "/"
        for handle in manifest.files():
            self._write(prefix + handle.path, [source.read_file(handle)])
        adopted = replace(_rebase(manifest, prefix), checkpoint_id=checkpoint_id, is_savepoint=False, location=self.uri)
        self.write_manifest(adopted)
        return adopted

    # -- retention -------------------------------------------------------------------------------
    def discard(self, checkpoint_id: int) -> None:
        try:
            self.fs.delete_dir(self.checkpoint_path(checkpoint_id))
        except (OSError, FileNotFoundError):
            pass

    def retain(self, keep: int, newest_complete: int, in_flight_base: int | None = None) -> None:
        """Keep the newest `keep` complete checkpoints; drop older ones and older incomplete ones.

        Files that a kept manifest references (the shared files of incremental chains) stay
        where they are; their directory goes once nothing references them any more.
        `in_flight_base` is the oldest checkpoint an in-flight one may build on: it and every
        newer complete checkpoint are kept too, or that checkpoint would reference lost files.
        """
        complete = self.complete_checkpoints()
        kept = complete[-keep:] if keep > 0 else []
        if in_flight_base is not None:
            kept = sorted(set(kept) | {cid for cid in complete if cid >= in_flight_base})
        doomed = [cid for cid in self.checkpoint_ids() if cid < newest_complete and cid not in kept]
        if not doomed:
            return
        referenced: set[str] = set()
        for checkpoint_id in kept:
            try:
                referenced.update(h.path for h in self.load_manifest(checkpoint_id).files())
            except (CorruptCheckpointError, NoCheckpointError):
                continue  # never loaded, so it protects nothing
        for checkpoint_id in doomed:
            prefix = self.checkpoint_dir_name(checkpoint_id) + "/"
            if not any(p.startswith(prefix) for p in referenced):
                self.discard(checkpoint_id)
                continue
            self._drop_unreferenced(checkpoint_id, referenced)

    def _drop_unreferenced(self, checkpoint_id: int, referenced: set[str]) -> None:
        directory = self.checkpoint_path(checkpoint_id)
        try:  # the manifest first: from here on the checkpoint is no longer complete
            self.fs.delete_file(posixpath.join(directory, MANIFEST_NAME))
        except (OSError, FileNotFoundError):
            pass
        try:
            infos = self.fs.get_file_info(pafs.FileSelector(directory, allow_not_found=True))
        except OSError:
            return
        name = self.checkpoint_dir_name(checkpoint_id)
        for info in infos:
            if info.type == pafs.FileType.File and posixpath.join(name, info.base_name) not in referenced:
                try:
                    self.fs.delete_file(info.path)
                except (OSError, FileNotFoundError):
                    pass


_SAVEPOINT_FILES = "files/"  # a savepoint's data files, under their checkpoint-relative paths


def _rebase(manifest: Manifest, prefix: str) -> Manifest:
    def moved(h: FileHandle | None) -> FileHandle | None:
        return None if h is None else FileHandle(prefix + h.path, h.size, h.sha256)

    operators = tuple(
        replace(
            op,
            subtasks=tuple(
                replace(
                    st,
                    keyed=moved(st.keyed),
                    operator=moved(st.operator),
                    keyed_base=tuple(FileHandle(prefix + h.path, h.size, h.sha256) for h in st.keyed_base),
                )
                for st in op.subtasks
            ),
        )
        for op in manifest.operators
    )
    return replace(manifest, operators=operators)


def create_savepoint(source: CheckpointStorage, which: str | int, target: str) -> Manifest:
    """Copy a complete checkpoint, with every file its chains reference, into `target`.

    The result is self-contained: `target/MANIFEST.json` plus the files under the same relative
    paths, verified on the way. Retention never touches it, and a job starts from it with
    `from_checkpoint=target`. `target` must not exist yet, or be empty.
    """
    manifest = source.resolve(which)
    dest = CheckpointStorage(target)
    existing = dest.fs.get_file_info(pafs.FileSelector(dest.root, allow_not_found=True))
    if existing:
        raise CheckpointError(f"savepoint directory {target!r} is not empty")
    for handle in manifest.files():
        copied = dest._write(_SAVEPOINT_FILES + handle.path, [source.read_file(handle)])
        if (copied.size, copied.sha256) != (handle.size, handle.sha256):
            raise CheckpointError(f"copying {handle.path} into the savepoint changed it")
    savepoint = replace(_rebase(manifest, _SAVEPOINT_FILES), is_savepoint=True, location=dest.uri)
    tmp = posixpath.join(dest.root, f".{MANIFEST_NAME}.{uuid.uuid4().hex}.tmp")
    with dest.fs.open_output_stream(tmp) as out:
        out.write(savepoint.to_json())
    dest.fs.move(tmp, posixpath.join(dest.root, MANIFEST_NAME))
    return savepoint


def load_savepoint(path: str, *, verify: bool = True) -> Manifest | None:
    """The verified manifest of the savepoint at `path`, or None if `path` holds no savepoint."""
    fs, root = _resolve(path)
    manifest_path = posixpath.join(root, MANIFEST_NAME)
    if fs.get_file_info(manifest_path).type != pafs.FileType.File:
        return None
    with fs.open_input_stream(manifest_path) as f:
        manifest = Manifest.from_json(f.read(), source=manifest_path)
    if not manifest.is_savepoint:
        return None
    storage = CheckpointStorage(path, create=False)
    manifest = replace(manifest, location=storage.uri)
    if verify:
        storage.verify(manifest)
    return manifest


def storage_for(manifest: Manifest, default: CheckpointStorage | None) -> CheckpointStorage:
    """The storage to read `manifest`'s files from: where it was loaded, else `default`."""
    if default is not None and (not manifest.location or manifest.location == default.uri):
        return default
    if not manifest.location:
        raise NoCheckpointError(f"checkpoint {manifest.checkpoint_id}: no storage to read its files from")
    return CheckpointStorage(manifest.location, create=False)
