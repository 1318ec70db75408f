"""A fixed view of the disk backend (`disk.py`) for a checkpoint's asynchronous part.

Snapshots follow the backends' contract (`contract.py`): the synchronous part is cheap, later
writes never leak into a snapshot, and the writer only reads it.

- A **delta** (the usual case with incremental checkpoints) takes a RocksDB snapshot (a
  sequence number; no copying) and the changed key sets; the asynchronous part reads just those
  keys from the snapshot.
- A **full** snapshot creates a RocksDB checkpoint (hard links to the immutable SST files,
  after flushing the memtable) in the working directory; the asynchronous part opens it
  read-only and streams it out key group by key group. The checkpoint is deleted when the
  snapshot is released (`on_snapshot_written`) or, if that comes later, as soon as nothing
  holds the snapshot any more (usually right after its writer is done).
"""

from __future__ import annotations

import pickle
import shutil
import weakref
from typing import Any

from .disk_keys import split_key, state_prefix
from .incremental import ChangedKeys
from .keygroups import KeyGroups, encode_key
from .manifest import FileHandle
from .sections import Sections


class DiskSnapshot:
    """A fixed view of a disk backend: a RocksDB checkpoint (full) or snapshot (delta)."""

    def __init__(
        self,
        key_groups: KeyGroups,
        *,
        checkpoint_id: int | None = None,
        checkpoint_dir: str | None = None,
        db_snapshot: Any = None,
        changed: ChangedKeys | None = None,
        base: tuple[FileHandle, ...] = (),
    ) -> None:
        self.key_groups = key_groups
        self.checkpoint_id = checkpoint_id
        self.changed = changed
        self.base = base
        self.encoded: list[tuple[int, Any]] | None = None  # never pickled early: the writer reads the db
        self._checkpoint_dir = checkpoint_dir
        self._db_snapshot = db_snapshot
        # the checkpoint's files go with the snapshot, whichever thread drops it last
        self._remove_dir: weakref.finalize[Any, Any] | None = None
        if checkpoint_dir is not None:
            self._remove_dir = weakref.finalize(self, shutil.rmtree, checkpoint_dir, ignore_errors=True)

    @property
    def is_delta(self) -> bool:
        return self.changed is not None

    @property
    def entries(self) -> int | None:
        return None  # unknown without reading the database; never serialised early

    def full_sections(self) -> Sections:
        from rocksdict import AccessType, Options, Rdict

        assert self._checkpoint_dir is not None
        db = Rdict(self._checkpoint_dir, Options(raw_mode=True), access_type=AccessType.read_only())
        try:
            current = -1
            section: dict[str, dict[Any, Any]] = {}
            it = db.iter()
            it.seek_to_first()
            while it.valid():
                kg, name = split_key(it.key())
                if kg != current:
                    if section:
                        yield current, section
                    current, section = kg, {}
                key, value = pickle.loads(it.value())
                section.setdefault(name, {})[key] = value
                it.next()
            if section:
                yield current, section
            del it
        finally:
            db.close()

    def delta_sections(self) -> Sections:
        assert self.changed is not None and self._db_snapshot is not None
        snap = self._db_snapshot
        for kg in sorted(self.changed):
            section: dict[str, Any] = {}
            for name, keys in self.changed[kg].items():
                prefix = state_prefix(kg, name)
                upserts, deleted = {}, []
                for key in keys:
                    try:
                        raw = snap[prefix + encode_key(key)]
                    except Exception as exc:  # rocksdict raises a bare Exception("key not found")
                        if isinstance(exc, KeyError) or "not found" in str(exc):
                            deleted.append(key)
                            continue
                        raise
                    upserts[key] = pickle.loads(raw)[1]
                section[name] = (upserts, deleted)
            yield kg, section

    def release(self) -> None:
        """Nothing reads this snapshot any more: drop the RocksDB snapshot, delete the checkpoint."""
        self._db_snapshot = None
        self._checkpoint_dir = None
        if self._remove_dir is not None:
            self._remove_dir()  # at most once, even if the finaliser ran
