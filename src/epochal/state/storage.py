"""Checkpoint storage: a directory per checkpoint on any pyarrow filesystem, manifest last.

Layout: `<root>/chk-<id:08d>/` holds one merged file per worker (`merged_files`; or, with
`CheckpointConfig(merge_files=False)`, one file per subtask and operator), then `MANIFEST.json`.
A checkpoint is *complete* iff its manifest exists. Every file, data and manifest alike, is
written under a temporary name and renamed into place, so a file under its own name is always
whole; the manifest's rename is the commit point of the epoch (dissertation §4.1.3). A copy of
the manifest (`MANIFEST.copy.json`) is written before it: a corrupt manifest is repaired from an
intact copy instead of costing the checkpoint (`manifest_copy`).

Bytes are verified where they are read (`checked_files.CheckedFiles`, which this class extends
with the layout of checkpoints, their manifests and their chained backups). Resolving a
checkpoint (`latest`, `resolve`) checks only the manifest's own checksum and that every listed
file exists with its recorded size (metadata calls). `verify` (`state.verify`) reads every
byte: the job master verifies the checkpoint it restores that way, before any task starts
(`runtime.master.restore_point`), so a corrupt file is refused before a sink commits anything
the checkpoint holds; the tasks check again as they read.

Retention (`retention.py`) and savepoints (`savepoints.py`) build on this module.
"""

from __future__ import annotations

import logging
import os
import posixpath
from collections.abc import Callable, Iterable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import pyarrow.fs as pafs

from ..errors import CheckpointError, CorruptCheckpointError, NoCheckpointError
from .checked_files import CheckedFiles, RangedFile, chunks_of, resolve_uri
from .manifest import CHECKPOINT_PREFIX, FileHandle, Manifest, checkpoint_dir_name, checkpoint_key
from .manifest_copy import MANIFEST_COPY_NAME, repair_manifest
from .retention import Retention

if TYPE_CHECKING:
    from .backups import BackupStore

log = logging.getLogger(__name__)

MANIFEST_NAME = "MANIFEST.json"


class CheckpointStorage(CheckedFiles):
    """Reads and writes checkpoints under one root directory (a local path or a pyarrow URI)."""

    def __init__(self, uri: str, create: bool = True, filesystem: pafs.FileSystem | None = None) -> None:
        checkpoint_key()  # a key too weak to sign with fails here, before any job starts
        self._filesystem = filesystem  # given (CheckpointConfig.filesystem): `uri` is a path in it
        super().__init__(uri, *((filesystem, uri.rstrip("/")) if filesystem is not None else resolve_uri(uri)))
        self._retention: Retention | None = None  # built on the first `retain`, on the driver
        # chained backups (`state.backups`), on a worker that keeps them: copies read before
        # storage, and a hook that is handed each data file written, with its bytes
        self.backups: BackupStore | None = None
        self.on_write: Callable[[int, FileHandle, list[bytes]], None] | None = None
        if not create:
            if self.fs.get_file_info(self.root).type != pafs.FileType.Directory:
                raise NoCheckpointError(f"no checkpoint directory {uri!r}")
            return
        try:
            self.fs.create_dir(self.root, recursive=True)
        except OSError as exc:
            raise CheckpointError(f"cannot create checkpoint directory {uri!r}: {exc}") from exc

    def __reduce__(self) -> tuple[Any, ...]:  # pyarrow filesystems re-resolve in other processes
        return (CheckpointStorage, (self.uri, True, self._filesystem))

    # -- paths -----------------------------------------------------------------------------------
    @staticmethod
    def checkpoint_dir_name(checkpoint_id: int) -> str:
        return checkpoint_dir_name(checkpoint_id)

    def checkpoint_path(self, checkpoint_id: int) -> str:
        return self._abs(checkpoint_dir_name(checkpoint_id))

    # -- writing ---------------------------------------------------------------------------------
    def write_file(self, checkpoint_id: int, name: str, data: bytes | Iterable[bytes]) -> FileHandle:
        """Write one data file of checkpoint `checkpoint_id` (not yet visible as complete).

        `data` may be an iterable of chunks, so a large file is never one `bytes` in memory.
        """
        relative = posixpath.join(checkpoint_dir_name(checkpoint_id), name)
        if self.on_write is None:
            return self.write(relative, data)
        chunks = list(chunks_of(data))  # the copy needs them too
        handle = self.write(relative, chunks)
        self.on_write(checkpoint_id, handle, chunks)
        return handle

    def write_manifest(self, manifest: Manifest) -> None:
        """Complete a checkpoint: the manifest goes last, atomically, after its copy."""
        self._check_shared_files(manifest)
        self.write_manifest_pair(checkpoint_dir_name(manifest.checkpoint_id), manifest.to_json())
        if self._retention is not None:
            self._retention.add(manifest)

    def write_manifest_pair(self, directory: str, data: bytes) -> None:
        """`directory`'s copy of a manifest, then the manifest (the commit point)."""
        self.write(posixpath.join(directory, MANIFEST_COPY_NAME), data)
        self.write(posixpath.join(directory, MANIFEST_NAME), data)

    def _check_shared_files(self, manifest: Manifest) -> None:
        """Refuse to complete a checkpoint whose chains reference a file that is gone.

        A subtask builds its delta on the last checkpoint it *heard* complete; if retention
        dropped that checkpoint's files meanwhile (a late notification, `retain=1`), the new
        checkpoint would be unrestorable. It fails instead, and the job's next one is whole.
        """
        own = checkpoint_dir_name(manifest.checkpoint_id) + "/"
        shared = [self._abs(h.path) for h in manifest.stored_files() if not h.path.startswith(own)]
        if not shared:
            return
        try:
            infos = self.fs.get_file_info(shared)
        except OSError as exc:
            raise CheckpointError(
                f"cannot check the shared files of checkpoint {manifest.checkpoint_id}: {exc}"
            ) from exc
        missing = [i.path for i in infos if i.type != pafs.FileType.File]
        if missing:
            raise CheckpointError(
                f"checkpoint {manifest.checkpoint_id} references files that retention removed: {missing[:3]}"
            )

    # -- reading ---------------------------------------------------------------------------------
    def read_file(self, handle: FileHandle) -> bytes:
        """`CheckedFiles.read_file`, or a chained backup's copy, checked against the same handle."""
        if self.backups is not None and (copy := self.backups.get(handle)) is not None:
            return copy
        return super().read_file(handle)

    def open_ranged(self, handle: FileHandle) -> list[bytes] | RangedFile:
        """`CheckedFiles.open_ranged`; a chained backup's copy comes whole."""
        if self.backups is not None and (copy := self.backups.get(handle)) is not None:
            return [copy]
        return super().open_ranged(handle)

    def read_manifest(self, relative: str) -> Manifest:
        """The manifest at `relative`, its checksum checked, located at this storage; if it is
        corrupt and its copy beside it (`MANIFEST_COPY_NAME`) is intact, the copy's, and the
        manifest is rewritten from it (repaired).

        Raises:
            NoCheckpointError: there is no file at `relative`.
            CorruptCheckpointError: the file is not an intact manifest, nor its copy.
        """
        path = self._abs(relative)
        try:
            with self.fs.open_input_stream(path) as f:
                data: bytes = f.read()
        except OSError as exc:
            raise NoCheckpointError(f"no manifest {relative!r} in {self.uri!r}") from exc
        try:
            return replace(Manifest.from_json(data, source=path), location=self.uri)
        except CorruptCheckpointError as exc:
            repaired = repair_manifest(self, relative, exc)
            if repaired is None:
                raise
            return repaired

    def checkpoint_ids(self) -> list[int]:
        """Ids of every checkpoint directory, complete or not, ascending."""
        try:
            infos = self.fs.get_file_info(pafs.FileSelector(self.root, allow_not_found=True))
        except OSError as exc:
            raise CheckpointError(f"cannot list {self.uri!r}: {exc}") from exc
        ids = []
        for info in infos:
            name = info.base_name
            if info.type == pafs.FileType.Directory and name.startswith(CHECKPOINT_PREFIX):
                suffix = name[len(CHECKPOINT_PREFIX) :]
                if suffix.isdigit():
                    ids.append(int(suffix))
        return sorted(ids)

    def has_manifest(self, checkpoint_id: int) -> bool:
        return self.has_file(posixpath.join(checkpoint_dir_name(checkpoint_id), MANIFEST_NAME))

    def load_manifest(self, checkpoint_id: int) -> Manifest:
        try:
            return self.read_manifest(posixpath.join(checkpoint_dir_name(checkpoint_id), MANIFEST_NAME))
        except NoCheckpointError as exc:
            raise NoCheckpointError(f"checkpoint {checkpoint_id} is not complete in {self.uri!r}") from exc

    def complete_checkpoints(self) -> list[int]:
        return [cid for cid in self.checkpoint_ids() if self.has_manifest(cid)]

    # -- verification ----------------------------------------------------------------------------
    def check_files(self, manifest: Manifest) -> None:
        """Check that every file of a checkpoint exists with its recorded size (metadata only;
        a merged file's size is the manifest's `merged` entry's).

        Raises:
            CorruptCheckpointError: a file is missing or has another size (truncated, appended).
        """
        handles = manifest.stored_files()
        if not handles:
            return
        try:
            infos = self.fs.get_file_info([self._abs(h.path) for h in handles])
        except OSError as exc:
            raise CorruptCheckpointError(f"checkpoint {manifest.checkpoint_id}: cannot list its files ({exc})") from exc
        for handle, info in zip(handles, infos, strict=True):
            if info.type != pafs.FileType.File:
                raise CorruptCheckpointError(f"checkpoint {manifest.checkpoint_id}: {handle.path} is missing")
            if info.size is not None and info.size != handle.size:
                raise CorruptCheckpointError(
                    f"checkpoint {manifest.checkpoint_id}: {handle.path} has {info.size} bytes, "
                    f"the manifest says {handle.size} (truncated or appended)"
                )

    def latest(self, before: int | None = None) -> Manifest | None:
        """The newest complete checkpoint (older than `before`, if given) whose manifest is
        intact and whose files are all present with their sizes; others are logged and skipped.

        The job master passes `before` to fall back past a checkpoint whose restore found a
        corrupt file.
        """
        return self._newest(before, check=True)

    def _newest(self, before: int | None, *, check: bool) -> Manifest | None:
        for checkpoint_id in reversed(self.complete_checkpoints()):
            if before is not None and checkpoint_id >= before:
                continue
            try:
                manifest = self.load_manifest(checkpoint_id)
                if check:
                    self.check_files(manifest)
                return manifest
            except CorruptCheckpointError as exc:
                log.warning("skipping corrupt checkpoint %d: %s", checkpoint_id, exc)
        return None

    def resolve(self, which: str | int, *, verify: bool = True) -> Manifest:
        """The manifest for `"latest"`, a checkpoint id, or a `chk-…` directory path of this
        storage (a savepoint, which may lie anywhere, is `savepoints.resolve`'s).

        `verify` checks that the files exist with their sizes (`check_files`); the bytes are
        verified when a restore reads them.
        """
        if which == "latest":
            manifest = self._newest(None, check=verify)
            if manifest is None:
                raise NoCheckpointError(f"no complete checkpoint in {self.uri!r}")
            return manifest
        checkpoint_id = self._checkpoint_id_of(which)
        manifest = self.load_manifest(checkpoint_id)
        if verify:
            self.check_files(manifest)
        return manifest

    def _checkpoint_id_of(self, which: str | int) -> int:
        if isinstance(which, int):
            return which
        if which.isdigit():
            return int(which)
        path = which.rstrip("/")
        base = posixpath.basename(path)
        if not base.startswith(CHECKPOINT_PREFIX) or not base[len(CHECKPOINT_PREFIX) :].isdigit():
            raise NoCheckpointError(f"{which!r} is not a checkpoint directory (chk-NNNNNNNN)")
        parent = posixpath.dirname(path)
        if parent and "://" not in path and os.path.abspath(parent) != self.root:
            raise NoCheckpointError(
                f"{which!r} is not in the job's checkpoint directory {self.uri!r}; "
                "set CheckpointConfig(directory=...) (or --checkpoint-dir) to its parent, or take a "
                "savepoint of it (epochal savepoint) and start from that"
            )
        return int(base[len(CHECKPOINT_PREFIX) :])

    # -- deleting --------------------------------------------------------------------------------
    def discard(self, checkpoint_id: int) -> None:
        """Delete a checkpoint's directory with everything in it (an aborted checkpoint)."""
        if self._retention is not None:
            self._retention.forget(checkpoint_id)
        try:
            self.fs.delete_dir(self.checkpoint_path(checkpoint_id))
        except OSError:
            pass

    def delete_manifest(self, checkpoint_id: int) -> None:
        """Make a checkpoint incomplete (the manifest first, then its copy); its files stay."""
        self._delete_quietly(posixpath.join(self.checkpoint_path(checkpoint_id), MANIFEST_NAME))
        self._delete_quietly(posixpath.join(self.checkpoint_path(checkpoint_id), MANIFEST_COPY_NAME))

    def retain(self, keep: int, newest_complete: int, in_flight_base: int | None = None) -> None:
        """Keep the newest `keep` complete checkpoints, and every complete one from
        `in_flight_base` on (an in-flight checkpoint may build on it); drop older ones and
        older incomplete ones. See `Retention.retain`; the reference counts are built from the
        manifests on the first call, then kept up to date in memory."""
        if self._retention is None:
            self._retention = Retention(self)
        self._retention.retain(keep, newest_complete, in_flight_base)


__all__ = ["MANIFEST_COPY_NAME", "MANIFEST_NAME", "CheckpointStorage"]
