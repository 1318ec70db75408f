"""Chained backups: copies of checkpoint files held by peer workers (ChronoStream §III-B).

ChronoStream backs each slice up on peer containers, the l-th copy of slice m on peer
`(m + l) % N`, so that a lost container's slices are rebuilt from local copies, in parallel, by
the peers that hold them (§III-E), instead of from replicated storage. Epochal's unit of a copy
is a checkpoint *file* (a subtask's sections of every key group it owns, `state.sections`), so
the chain runs over workers: with `StateConfig(backup_replicas=L)`, worker `i` sends every file
it writes to workers `i+1 .. i+L` (mod the stage's workers), and keeps it itself. The storage
stays the truth: a copy is read only when its size and SHA-256 match the manifest's handle, and
a file without a copy is read from storage as before.

A holder keeps, per worker it backs up, the files the last `retain` checkpoints of that worker
reference (shared files of incremental chains included), as the worker tells it after each
snapshot (`BackupRetained`): older and aborted checkpoints' copies are dropped.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

from .manifest import FileHandle


def holders(worker: int, workers: int, replicas: int) -> list[int]:
    """The workers that hold copies of `worker`'s files: the next `replicas` ones, in a chain."""
    return [(worker + step) % workers for step in range(1, min(replicas, workers - 1) + 1)]


@dataclass(frozen=True, slots=True)
class BackupFile:
    """A copy of one file `worker` wrote for checkpoint `checkpoint_id`."""

    worker: int
    checkpoint_id: int
    handle: FileHandle
    data: bytes


@dataclass(frozen=True, slots=True)
class BackupRetained:
    """The files `worker`'s snapshot for `checkpoint_id` references (what a restore of it reads)."""

    worker: int
    checkpoint_id: int
    paths: frozenset[str]


@dataclass(slots=True)
class _Owner:
    """What one backed-up worker's copies are: files by label (a merged file's segments one by
    one), and its last snapshots' file sets (by path)."""

    files: dict[str, BackupFile] = field(default_factory=dict)
    retained: dict[int, set[str]] = field(default_factory=dict)  # checkpoint id → paths, oldest first


class BackupStore:
    """The copies one worker holds, its own files included, in memory."""

    def __init__(self, retain: int) -> None:
        self.retain = max(1, retain)
        self._owners: dict[int, _Owner] = {}
        self.hits = 0  # files read from a copy
        self.bytes_read = 0

    def put(self, copy: BackupFile) -> None:
        self._owners.setdefault(copy.worker, _Owner()).files[copy.handle.label] = copy

    def retained(self, notice: BackupRetained) -> None:
        """A task of `notice.worker` snapshotted `notice.checkpoint_id`: keep the files the
        worker's last `retain` snapshots reference, and those of snapshots whose tasks are still
        reporting (the newest one's, and newer)."""
        owner = self._owners.setdefault(notice.worker, _Owner())
        owner.retained.setdefault(notice.checkpoint_id, set()).update(notice.paths)
        for old in sorted(owner.retained)[: -self.retain]:
            del owner.retained[old]
        newest = max(owner.retained)
        keep = set().union(*owner.retained.values())
        owner.files = {
            label: copy for label, copy in owner.files.items()
            if copy.handle.path in keep or copy.checkpoint_id >= newest
        }

    def get(self, handle: FileHandle) -> bytes | None:
        """The bytes of `handle` if a copy is here and matches it; None: read it from storage."""
        for owner in list(self._owners.values()):  # the snapshot thread reads too (pre-copy)
            copy = owner.files.get(handle.label)
            if copy is None:
                continue
            data = copy.data
            if len(data) == handle.size and hashlib.sha256(data).hexdigest() == handle.sha256:
                self.hits += 1
                self.bytes_read += len(data)
                return data
        return None

    @property
    def size(self) -> int:
        """Bytes held."""
        return sum(len(c.data) for o in self._owners.values() for c in o.files.values())

    def workers(self) -> set[int]:
        """The workers whose files are held here."""
        return {w for w, o in self._owners.items() if o.files}
