"""Keyed state on disk: one embedded RocksDB per subtask (via `rocksdict`), for state larger
than memory.

Why RocksDB, and why `rocksdict`: an LSM tree writes sequentially and compacts in the
background, so a write-heavy streaming workload stays fast when the state is many times the
memory (the reason Flink's large-state backend is RocksDB too). `rocksdict` ships RocksDB inside
manylinux/macOS/Windows wheels (no system library, unlike `plyvel`), is released regularly, and
exposes what a checkpoint needs: consistent snapshots, hard-link checkpoints and write batches.
LMDB (`lmdb`) was the alternative: faster reads, but a B+tree whose writes rewrite pages and
whose map size must be fixed up front.

The layout of a database key is in `disk_keys.py`, the snapshots in `disk_snapshot.py`.

Values obtained for in-place change (`ListState.add`, `MapState.put`, a mutable `ValueState`
value) are held and written back before the next access, so the handles work unchanged.
"""

from __future__ import annotations

import os
import pickle
import re
import shutil
import tempfile
import weakref
from collections.abc import Callable, Iterator
from typing import Any

from .disk_keys import group_prefix, split_key, state_prefix
from .disk_snapshot import DiskSnapshot
from .incremental import ChangedKeys, IncrementalTracker, add_changed
from .keygroups import KeyGroups, encode_key, owned_key_group
from .manifest import FileHandle
from .sections import GroupCopies, KeyedGroups
from .values import is_immutable, private

_PICKLE = 5
_MISSING = object()


class DiskKeyedStateBackend:
    """Keyed state of one subtask in a RocksDB database; implements `KeyedStateBackend`."""

    def __init__(
        self,
        key_groups: KeyGroups,
        max_parallelism: int,
        *,
        local_dir: str | None = None,
        label: str = "state",
        incremental: bool = True,
        compact_every: int = 10,
        compact_ratio: float = 1.0,
    ) -> None:
        from rocksdict import Options, Rdict

        if max_parallelism > 1 << 16:
            raise ValueError("the disk backend supports at most 65536 key groups")
        self.key_groups = key_groups
        self.max_parallelism = max_parallelism
        if local_dir is not None:
            os.makedirs(local_dir, exist_ok=True)
        safe = re.sub(r"[^A-Za-z0-9_.-]", "_", label)[:40]
        self.directory = tempfile.mkdtemp(prefix=f"epochal-{safe}-", dir=local_dir)
        self.db = Rdict(os.path.join(self.directory, "db"), Options(raw_mode=True))
        self.current_key: Any = None
        self.current_key_group = -1
        self._current_encoded = b""
        self._changed: ChangedKeys = {}
        self._held: tuple[bytes, Any, Any] | None = None  # (db key, key, value) to write back
        self._snapshots = 0
        self._unwritten: list[weakref.ref[DiskSnapshot]] = []  # snapshots not yet released
        self.tracker = IncrementalTracker(incremental, compact_every, compact_ratio)

    # -- current key ---------------------------------------------------------------------------
    def set_current_key(self, key: Any, key_group: int | None = None) -> None:
        self.current_key_group = owned_key_group(key, key_group, self.key_groups, self.max_parallelism)
        self.current_key = key
        self._current_encoded = encode_key(key)

    def _db_key(self, name: str) -> bytes:
        return state_prefix(self.current_key_group, name) + self._current_encoded

    def _mark(self, name: str, key_group: int, key: Any) -> None:
        add_changed(self._changed, key_group, name, key)

    def _write_back(self) -> None:
        if self._held is not None:
            db_key, key, value = self._held
            self._held = None
            self.db.put(db_key, pickle.dumps((key, value), _PICKLE))

    def _read(self, db_key: bytes) -> Any:
        raw = self.db.get(db_key)
        return _MISSING if raw is None else pickle.loads(raw)[1]

    # -- entries of the current key ------------------------------------------------------------
    def get(self, name: str, default: Any = None) -> Any:
        self._write_back()
        value = self._read(self._db_key(name))
        return default if value is _MISSING else value

    def get_mutable(self, name: str, factory: Callable[[], Any]) -> Any:
        self._write_back()
        db_key = self._db_key(name)
        value = self._read(db_key)
        if value is _MISSING:
            value = factory()
        self._held = (db_key, self.current_key, value)
        self._mark(name, self.current_key_group, self.current_key)
        return value

    def get_for_read(self, name: str, default: Any = None) -> Any:
        self._write_back()
        db_key = self._db_key(name)
        value = self._read(db_key)
        if value is _MISSING:
            return private(default)
        if not is_immutable(value):  # the caller may change it in place: write it back
            self._held = (db_key, self.current_key, value)
            self._mark(name, self.current_key_group, self.current_key)
        return value

    def put(self, name: str, value: Any) -> None:
        self._write_back()
        self.db.put(self._db_key(name), pickle.dumps((self.current_key, value), _PICKLE))
        self._mark(name, self.current_key_group, self.current_key)

    def reduce_into(
        self, out: list[Any], name: str, records: list[Any], keys: list[Any], key_groups: list[int],
        fn: Callable[[Any, Any], Any],
    ) -> None:
        """Fold each record into its key's value, a key at a time (`KeyedStateBackend.reduce_into`)."""
        for record, key, key_group in zip(records, keys, key_groups, strict=False):
            self.set_current_key(key, key_group)
            acc = self.get_for_read(name, _MISSING)
            value = record if acc is _MISSING else fn(acc, record)
            self.put(name, value)
            out.append(value)

    def count_into(self, out: list[Any], name: str, keys: list[Any], key_groups: list[int]) -> None:
        """Add one to each key's count, a key at a time (`KeyedStateBackend.count_into`)."""
        for key, key_group in zip(keys, key_groups, strict=False):
            self.set_current_key(key, key_group)
            count = self.get(name, 0) + 1
            self.put(name, count)
            out.append((key, count))

    def delete(self, name: str) -> None:
        self._write_back()
        db_key = self._db_key(name)
        if self.db.get(db_key) is not None:
            self.db.delete(db_key)
            self._mark(name, self.current_key_group, self.current_key)

    # -- whole-key-group access ----------------------------------------------------------------
    def keys(self, name: str) -> Iterator[tuple[int, Any]]:
        self._write_back()
        out = []
        it = self.db.iter()
        for kg in self.key_groups:
            prefix = state_prefix(kg, name)
            it.seek(prefix)
            while it.valid() and it.key().startswith(prefix):
                out.append((kg, pickle.loads(it.value())[0]))
                it.next()
        del it
        return iter(out)

    def group_keys(self, name: str, key_group: int) -> list[Any]:
        self._write_back()
        prefix = state_prefix(key_group, name)
        out = []
        it = self.db.iter()
        it.seek(prefix)
        while it.valid() and it.key().startswith(prefix):
            out.append(pickle.loads(it.value())[0])
            it.next()
        del it
        return out

    def entries(self, key: Any) -> dict[str, Any]:
        """Scans the key's key group: its states' names are not kept apart from their entries."""
        self._write_back()
        key_group = owned_key_group(key, None, self.key_groups, self.max_parallelism)
        group = group_prefix(key_group)
        encoded = encode_key(key)
        out: dict[str, Any] = {}
        it = self.db.iter()
        it.seek(group)
        while it.valid() and (db_key := it.key()).startswith(group):
            name = split_key(db_key)[1]
            if db_key == state_prefix(key_group, name) + encoded:
                out[name] = pickle.loads(it.value())[1]
            it.next()
        del it
        return out

    # -- snapshots -----------------------------------------------------------------------------
    def snapshot(self, checkpoint_id: int | None = None) -> DiskSnapshot:
        """Fix the state: a RocksDB snapshot for a delta, a hard-link checkpoint for a full one."""
        self._write_back()
        if checkpoint_id is None:
            return DiskSnapshot(self.key_groups, checkpoint_dir=self._checkpoint())
        changed = {kg: states for kg, states in self._changed.items() if any(states.values())}
        self._changed = {}
        plan = self.tracker.plan(checkpoint_id, changed)
        union, base = plan.changed, plan.base
        if union is None:
            snap = DiskSnapshot(self.key_groups, checkpoint_id=checkpoint_id, checkpoint_dir=self._checkpoint())
        else:
            snap = DiskSnapshot(
                self.key_groups, checkpoint_id=checkpoint_id, db_snapshot=self.db.snapshot(), changed=union, base=base
            )
        self._unwritten = [r for r in self._unwritten if r() is not None]
        self._unwritten.append(weakref.ref(snap))
        return snap

    def on_snapshot_written(self, checkpoint_id: int, chain: tuple[FileHandle, ...] | None) -> None:
        """The writer of `checkpoint_id` is done (task's thread): record the chain, release the
        snapshot (its RocksDB snapshot or checkpoint)."""
        self.tracker.on_written(checkpoint_id, chain)
        unwritten = []
        for ref in self._unwritten:
            snap = ref()
            if snap is None:
                continue
            if snap.checkpoint_id == checkpoint_id:
                snap.release()
            else:
                unwritten.append(ref)
        self._unwritten = unwritten

    def _checkpoint(self) -> str:
        from rocksdict import Checkpoint

        self._snapshots += 1
        path = os.path.join(self.directory, f"snapshot-{self._snapshots}")
        Checkpoint(self.db).create_checkpoint(path)
        return path

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        self.tracker.on_complete(checkpoint_id)

    def restore(self, groups: KeyedGroups) -> None:
        from rocksdict import WriteBatch

        self._write_back()
        batch = WriteBatch(raw_mode=True)
        for kg, states in groups.items():
            if kg not in self.key_groups:
                continue
            for name, entries in states.items():
                prefix = state_prefix(kg, name)
                for key, value in entries.items():
                    batch.put(prefix + encode_key(key), pickle.dumps((key, value), _PICKLE))
        self.db.write(batch)

    def reassign(self, owned: KeyGroups, gained: KeyedGroups, copies: GroupCopies | None = None) -> None:
        """Own `owned` from now on (a migration): delete the key groups no longer owned, load
        `gained`. Right after a snapshot, whose RocksDB snapshot or checkpoint keeps the old
        entries; the next snapshot deletes the dropped keys and writes the gained ones, one by
        one (`copies` go unused: its deltas are read from the database by key)."""
        from rocksdict import WriteBatch

        self._write_back()
        lost = [g for g in self.key_groups if g not in owned]
        batch = WriteBatch(raw_mode=True)
        it = self.db.iter()
        for kg in lost:
            prefix = group_prefix(kg)
            it.seek(prefix)
            while it.valid() and (db_key := it.key()).startswith(prefix):
                add_changed(self._changed, kg, split_key(db_key)[1], pickle.loads(it.value())[0])
                batch.delete(db_key)
                it.next()
        del it
        self.db.write(batch)
        self.key_groups = owned
        self.restore(gained)
        for kg, states in gained.items():
            for name, entries in states.items():
                for key in entries:
                    add_changed(self._changed, kg, name, key)

    def close(self) -> None:
        self._held = None
        try:
            self.db.close()
        finally:
            shutil.rmtree(self.directory, ignore_errors=True)
