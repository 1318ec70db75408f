"""Retention: which checkpoints stay, and which files go with the ones that do not.

Incremental checkpoints make files *shared*: a subtask's keyed state is a chain (a full file,
then deltas, ChronoStream §III-B; dissertation §4.5.2) whose earlier files live in the
directories of earlier checkpoints. So retention counts references: a checkpoint that falls
out of retention loses its manifest at once, but a file survives as long as a retained
manifest lists it, and a directory goes once none of its files is listed any more.

The counts live in memory: built once from the manifests on disk when a `Retention` starts,
then updated as manifests are added and dropped; dropping one never reloads the others.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Protocol

from ..errors import CorruptCheckpointError, NoCheckpointError
from .manifest import Manifest, checkpoint_of_path

__all__ = ["Retention"]

log = logging.getLogger(__name__)


class RetainedStorage(Protocol):
    """What retention needs of the storage it retains (`state.storage.CheckpointStorage`)."""

    def checkpoint_ids(self) -> Iterable[int]: ...
    def complete_checkpoints(self) -> Iterable[int]: ...
    def load_manifest(self, checkpoint_id: int) -> Manifest: ...
    def delete_manifest(self, checkpoint_id: int) -> None: ...
    def delete_file(self, relative: str) -> None: ...
    def discard(self, checkpoint_id: int) -> None: ...


class Retention:
    """Reference counts of the files of one storage's complete checkpoints.

    Only one process may retain a storage (the job's driver): the counts assume that every
    manifest written or dropped meanwhile went through this object.
    """

    def __init__(self, storage: RetainedStorage) -> None:
        self._storage = storage
        self._files: dict[int, tuple[str, ...]] = {}  # complete checkpoint -> the files it lists
        self._refs: dict[str, int] = {}  # file -> how many complete checkpoints list it
        self._live: dict[int, int] = {}  # checkpoint directory -> how many of its files are listed
        for checkpoint_id in storage.complete_checkpoints():
            try:
                self.add(storage.load_manifest(checkpoint_id))
            except (CorruptCheckpointError, NoCheckpointError) as exc:
                # complete but unreadable: it counts towards `keep`, but protects no file
                log.warning("retention: checkpoint %d protects no files: %s", checkpoint_id, exc)
                self._files[checkpoint_id] = ()

    # -- the counts ------------------------------------------------------------------------------
    def add(self, manifest: Manifest) -> None:
        """Count the files of a newly complete checkpoint."""
        self.forget(manifest.checkpoint_id)  # rewritten (a retried final checkpoint): count once
        paths = tuple(h.path for h in manifest.stored_files())  # a merged file once, whatever its segments
        self._files[manifest.checkpoint_id] = paths
        for path in paths:
            count = self._refs.get(path, 0)
            self._refs[path] = count + 1
            if count == 0:
                owner = checkpoint_of_path(path)
                if owner is not None:
                    self._live[owner] = self._live.get(owner, 0) + 1

    def forget(self, checkpoint_id: int) -> list[str]:
        """Stop counting a checkpoint's files; returns those no complete checkpoint lists now."""
        freed: list[str] = []
        for path in self._files.pop(checkpoint_id, ()):
            count = self._refs[path] - 1
            if count:
                self._refs[path] = count
                continue
            del self._refs[path]
            freed.append(path)
            owner = checkpoint_of_path(path)
            if owner is not None:
                if self._live[owner] == 1:
                    del self._live[owner]
                else:
                    self._live[owner] -= 1
        return freed

    def references(self, path: str) -> int:
        """How many complete checkpoints list the file at `path`."""
        return self._refs.get(path, 0)

    def complete(self) -> list[int]:
        """The complete checkpoints, ascending."""
        return sorted(self._files)

    # -- dropping --------------------------------------------------------------------------------
    def retain(self, keep: int, newest_complete: int, in_flight_base: int | None = None) -> None:
        """Keep the newest `keep` complete checkpoints; drop older ones and older incomplete ones.

        `in_flight_base` is the oldest checkpoint an in-flight one may build on: it and every
        newer complete checkpoint are kept too, or that checkpoint would reference lost files.
        A directory that still holds a file a kept manifest lists stays (without its manifest)
        until the last such manifest goes.
        """
        complete = self.complete()
        kept = set(complete[-keep:]) if keep > 0 else set()
        if in_flight_base is not None:
            kept.update(cid for cid in complete if cid >= in_flight_base)
        for checkpoint_id in complete:
            if checkpoint_id < newest_complete and checkpoint_id not in kept:
                self._drop(checkpoint_id)
        # leftovers: directories of checkpoints that never completed, and emptied ones
        for checkpoint_id in self._storage.checkpoint_ids():
            if checkpoint_id < newest_complete and not self._holds_listed_files(checkpoint_id):
                self._storage.discard(checkpoint_id)

    def _holds_listed_files(self, checkpoint_id: int) -> bool:
        return checkpoint_id in self._files or checkpoint_id in self._live

    def _drop(self, checkpoint_id: int) -> None:
        self._storage.delete_manifest(checkpoint_id)  # first: from here on it is not complete
        doomed_dirs: set[int] = set()
        for path in self.forget(checkpoint_id):
            owner = checkpoint_of_path(path)
            if owner is not None and not self._holds_listed_files(owner):
                doomed_dirs.add(owner)  # the whole directory goes, leftovers with it
            else:
                self._storage.delete_file(path)
        if not self._holds_listed_files(checkpoint_id):
            doomed_dirs.add(checkpoint_id)
        for owner in sorted(doomed_dirs):
            self._storage.discard(owner)
