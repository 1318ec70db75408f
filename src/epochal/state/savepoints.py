"""Savepoints: a complete checkpoint copied, with every file of its chains, into a directory the
user owns.

A savepoint is self-contained (`MANIFEST.json` and its copy at its root, the files under `files/`), never
touched by retention, and restorable by any job whose operators carry the same uids: a job
forked from a snapshot, at another parallelism or with changed logic (dissertation §4.3,
application provenance and migration). A job that starts from one *adopts* it: copies it in as
its own storage's next checkpoint, so it never reads or deletes the user's directory again.
"""

from __future__ import annotations

import hashlib
import posixpath
from dataclasses import replace

import pyarrow.fs as pafs

from ..errors import CheckpointError, CorruptCheckpointError, NoCheckpointError
from .checked_files import CheckedFiles, resolve_uri
from .manifest import FileHandle, Manifest
from .storage import MANIFEST_NAME, CheckpointStorage

__all__ = ["create_savepoint", "load_savepoint", "adopt", "storage_for", "rebase"]

_SAVEPOINT_FILES = "files/"  # a savepoint's data files, under their checkpoint-relative paths


def rebase(manifest: Manifest, prefix: str) -> Manifest:
    """`manifest` with `prefix` put before the path of every file it lists."""

    def moved(h: FileHandle) -> FileHandle:
        return replace(h, path=prefix + h.path)

    operators = tuple(
        replace(
            op,
            subtasks=tuple(
                replace(
                    st,
                    keyed=None if st.keyed is None else moved(st.keyed),
                    operator=None if st.operator is None else moved(st.operator),
                    keyed_base=tuple(moved(h) for h in st.keyed_base),
                )
                for st in op.subtasks
            ),
        )
        for op in manifest.operators
    )
    split_logs = tuple(replace(log, segments=tuple(moved(h) for h in log.segments)) for log in manifest.split_logs)
    merged = tuple(moved(h) for h in manifest.merged)
    patches = tuple(replace(patch, file=moved(patch.file)) for patch in manifest.patches)
    return replace(manifest, operators=operators, split_logs=split_logs, merged=merged, patches=patches)


def _copy_files(manifest: Manifest, dest: CheckpointStorage, prefix: str) -> None:
    """Copy every file of `manifest` into `dest` under `prefix`, its bytes verified on the way:
    a merged file whole (against its own checksum), with every segment the manifest lists of
    it checked too."""
    source = storage_for(manifest, None)
    segments: dict[str, list[FileHandle]] = {}
    for handle in manifest.files():
        if handle.is_segment:
            segments.setdefault(handle.path, []).append(handle)
    for handle in manifest.stored_files():
        data = CheckedFiles.read_file(source, handle)  # the whole file, checked
        for segment in segments.get(handle.path, ()):
            start = segment.offset or 0
            part = data[start: start + segment.size]
            if hashlib.sha256(part).hexdigest() != segment.sha256 or len(part) != segment.size:
                raise CorruptCheckpointError(f"{segment.label}: checksum mismatch (corrupt or truncated)")
        copied = dest.write(prefix + handle.path, data)
        if (copied.size, copied.sha256) != (handle.size, handle.sha256):
            raise CheckpointError(f"copying {handle.path} changed it")


def create_savepoint(source: CheckpointStorage, which: str | int, target: str) -> Manifest:
    """Copy a complete checkpoint, with every file its chains reference, into `target`.

    The result is self-contained: `target/MANIFEST.json` plus the files under the same relative
    paths, verified on the way. Retention never touches it, and a job starts from it with
    `from_checkpoint=target`. `target` must not exist yet, or be empty.
    """
    manifest = source.resolve(which)
    dest = CheckpointStorage(target)
    if dest.fs.get_file_info(pafs.FileSelector(dest.root, allow_not_found=True)):
        raise CheckpointError(f"savepoint directory {target!r} is not empty")
    _copy_files(manifest, dest, _SAVEPOINT_FILES)
    savepoint = replace(rebase(manifest, _SAVEPOINT_FILES), is_savepoint=True, location=dest.uri)
    dest.write_manifest_pair("", savepoint.to_json())
    return savepoint


def load_savepoint(path: str, *, verify: bool = True) -> Manifest | None:
    """The manifest of the savepoint at `path`, or None if `path` holds no savepoint.

    `verify` checks that its files exist with their sizes; their bytes are verified when read.
    """
    fs, root = resolve_uri(path)
    if fs.get_file_info(posixpath.join(root, MANIFEST_NAME)).type != pafs.FileType.File:
        return None
    storage = CheckpointStorage(path, create=False)
    manifest = storage.read_manifest(MANIFEST_NAME)
    if not manifest.is_savepoint:
        return None
    if verify:
        storage.check_files(manifest)
    return manifest


def adopt(storage: CheckpointStorage, manifest: Manifest) -> Manifest:
    """Copy a checkpoint from elsewhere (a savepoint) into `storage` as its next checkpoint.

    Hosts whose workers load the manifest by id from the job's own storage (Spark) start from
    the adopted copy; its files are then the first base of the job's chains.
    """
    checkpoint_id = max(storage.checkpoint_ids(), default=0) + 1
    prefix = storage.checkpoint_dir_name(checkpoint_id) + "/"
    _copy_files(manifest, storage, prefix)
    adopted = replace(rebase(manifest, prefix), checkpoint_id=checkpoint_id, is_savepoint=False, location=storage.uri)
    storage.write_manifest(adopted)
    return adopted


def resolve(storage: CheckpointStorage, which: str | int, *, verify: bool = True) -> Manifest:
    """What a job restores: `storage.resolve(which)`, or the savepoint in the directory `which`
    (which may lie anywhere: it is self-contained). With `verify` a savepoint is adopted as the
    storage's next checkpoint (`adopt`): checkpoint ids go on from it, and the job never reads (or
    deletes) anything in the user's directory again."""
    if isinstance(which, str) and which != "latest" and not which.isdigit():
        savepoint = load_savepoint(which, verify=verify)
        if savepoint is not None:
            return adopt(storage, savepoint) if verify else savepoint
    return storage.resolve(which, verify=verify)


def storage_for(manifest: Manifest, default: CheckpointStorage | None) -> CheckpointStorage:
    """The storage to read `manifest`'s files from: where it was loaded, else `default`."""
    if default is not None and (not manifest.location or manifest.location == default.uri):
        return default
    if not manifest.location:
        raise NoCheckpointError(f"checkpoint {manifest.checkpoint_id}: no storage to read its files from")
    return CheckpointStorage(manifest.location, create=False)
