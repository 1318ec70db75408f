"""Reading every byte of a checkpoint against its manifest, before anything of it is used.

A restore checks each file where it reads it, but a restore is spread over N tasks: on Spark a
sink subtask may have committed the restored checkpoint's pending output (dissertation §4.1.3:
committables of a complete checkpoint are committed on restore) before another subtask finds
its own state file corrupt, and the fallback to the checkpoint before then replays that output.
So the job master verifies the whole checkpoint first, on the driver, before any task starts
(`runtime.master.restore_point`): a corrupt checkpoint is refused before anything of it is
committed.

Files are streamed in chunks (a large state file is never one `bytes` in memory) on a few
threads: pyarrow and hashlib release the GIL, so an object store's latency overlaps and a local
disk reads at its speed.
"""

from __future__ import annotations

import hashlib
import posixpath
from concurrent.futures import ThreadPoolExecutor

from ..errors import CorruptCheckpointError
from .manifest import FileHandle, Manifest, checkpoint_of_path
from .storage import CheckpointStorage

CHUNK = 4 << 20  # bytes hashed at once
THREADS = 4  # files read at once


def verify_file(storage: CheckpointStorage, handle: FileHandle) -> None:
    """Read one file of a checkpoint in chunks and check its size and SHA-256 (a segment of a
    merged file: its bytes at its offset).

    Raises:
        CorruptCheckpointError: missing, another size, or another digest; names the
            checkpoint whose directory holds it and the file.
    """
    label = _label(handle.path)
    digest, size = hashlib.sha256(), 0
    try:
        path = posixpath.join(storage.root, handle.path)
        if handle.offset is None:
            with storage.fs.open_input_stream(path) as f:
                while chunk := f.read(CHUNK):
                    digest.update(chunk)
                    size += len(chunk)
        else:  # a segment of a merged file the manifest does not list whole
            with storage.fs.open_input_file(path) as f:
                f.seek(handle.offset)
                while size < handle.size and (chunk := f.read(min(CHUNK, handle.size - size))):
                    digest.update(chunk)
                    size += len(chunk)
    except OSError as exc:
        raise CorruptCheckpointError(f"{label}{handle.label}: missing ({exc})") from exc
    if size != handle.size:
        raise CorruptCheckpointError(f"{label}{handle.label}: {size} bytes, the manifest says {handle.size} "
                                     "(truncated or appended)")
    if digest.hexdigest() != handle.sha256:
        raise CorruptCheckpointError(f"{label}{handle.label}: checksum mismatch (corrupt or truncated)")


def verify_checkpoint(storage: CheckpointStorage, manifest: Manifest, threads: int = THREADS) -> int:
    """Read every file a restore of `manifest` reads (its chains' older files included) and check
    each against the manifest; the bytes read.

    Raises:
        CorruptCheckpointError: the first bad file found.
    """
    handles = _to_read(manifest)
    if len(handles) <= 1 or threads <= 1:
        for handle in handles:
            verify_file(storage, handle)
    else:
        with ThreadPoolExecutor(min(threads, len(handles)), thread_name_prefix="epochal-verify") as pool:
            futures = [pool.submit(verify_file, storage, h) for h in handles]
            try:
                for future in futures:
                    future.result()  # the first error, in the manifest's order
            except CorruptCheckpointError:
                pool.shutdown(cancel_futures=True)  # the files not begun yet are not read
                raise
    return sum(h.size for h in handles)


def _to_read(manifest: Manifest) -> list[FileHandle]:
    """The handles to read once each: whole files, and each merged file whole (its checksum covers
    its segments' bytes) instead of its segments one by one; a segment of a merged file the
    manifest does not list is read at its offset."""
    merged = {h.path: h for h in manifest.merged}
    out: dict[str, FileHandle] = {}
    for handle in manifest.files():
        whole = merged.get(handle.path) if handle.is_segment else handle
        out.setdefault(handle.label if whole is None else whole.path, handle if whole is None else whole)
    return list(out.values())


def _label(path: str) -> str:
    checkpoint_id = checkpoint_of_path(path)
    return "" if checkpoint_id is None else f"checkpoint {checkpoint_id}: "
