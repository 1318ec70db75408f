"""Chained backups' copies (`state.backups`): placement, retention, and checked reads."""

from __future__ import annotations

import hashlib

import pytest

from epochal.state.backups import BackupFile, BackupRetained, BackupStore, holders
from epochal.state.manifest import FileHandle
from epochal.state.storage import CheckpointStorage


def _copy(worker: int, checkpoint_id: int, name: str, data: bytes = b"state") -> BackupFile:
    handle = FileHandle(f"chk-{checkpoint_id:08d}/{name}", len(data), hashlib.sha256(data).hexdigest())
    return BackupFile(worker, checkpoint_id, handle, data)


def test_holders_form_a_chain_over_the_other_workers() -> None:
    assert holders(0, 4, 1) == [1]
    assert holders(3, 4, 1) == [0]
    assert holders(2, 4, 2) == [3, 0]
    assert holders(1, 2, 3) == [0]  # never itself, whatever the replicas
    # every worker is held by as many peers as replicas, and holds as many
    held_by = [w for worker in range(5) for w in holders(worker, 5, 2)]
    assert sorted(held_by) == sorted(list(range(5)) * 2)


def test_a_copy_is_read_only_when_it_matches_the_handle() -> None:
    store = BackupStore(retain=2)
    copy = _copy(1, 3, "a.keyed")
    store.put(copy)
    assert store.get(copy.handle) == b"state"
    assert store.hits == 1 and store.bytes_read == 5
    other = FileHandle(copy.handle.path, 5, hashlib.sha256(b"other").hexdigest())
    assert store.get(other) is None, "a copy that differs from the manifest's handle was read"
    store.put(BackupFile(1, 3, copy.handle, b"stale"))  # corrupt in memory
    assert store.get(copy.handle) is None


def test_retention_keeps_what_the_last_snapshots_reference_and_newer_files() -> None:
    store = BackupStore(retain=2)
    base, d1, d2, d3 = (_copy(0, c, f"{c}.keyed") for c in (1, 2, 3, 4))
    for copy in (base, d1):
        store.put(copy)
    store.retained(BackupRetained(0, 1, frozenset({base.handle.path})))
    store.retained(BackupRetained(0, 2, frozenset({base.handle.path, d1.handle.path})))
    store.put(d2)
    store.put(d3)  # written for checkpoint 4 before 3's notice: kept, it is newer
    store.retained(BackupRetained(0, 3, frozenset({base.handle.path, d1.handle.path, d2.handle.path})))
    assert store.get(d3.handle) is not None
    # a full file at 5 ends the chain: once 5 and 4 are the last two notices, the chain's files go
    full = _copy(0, 5, "5.keyed")
    store.put(full)
    store.retained(BackupRetained(0, 4, frozenset({d3.handle.path})))
    store.retained(BackupRetained(0, 5, frozenset({full.handle.path})))
    assert [store.get(c.handle) is not None for c in (base, d1, d2, d3, full)] == [False, False, False, True, True]


def test_notices_of_one_checkpoint_from_several_tasks_add_up() -> None:
    store = BackupStore(retain=1)
    a, b = _copy(0, 7, "a.keyed"), _copy(0, 7, "b.keyed")
    store.put(a)
    store.put(b)
    store.retained(BackupRetained(0, 7, frozenset({a.handle.path})))
    store.retained(BackupRetained(0, 7, frozenset({b.handle.path})))
    store.retained(BackupRetained(0, 8, frozenset({a.handle.path, b.handle.path})))
    assert store.get(a.handle) is not None and store.get(b.handle) is not None


def test_storage_reads_a_copy_first_and_hands_every_written_file_to_its_hook(tmp_path: object) -> None:
    storage = CheckpointStorage(str(tmp_path))
    written: list[tuple[int, FileHandle, bytes]] = []
    storage.on_write = lambda cid, handle, chunks: written.append((cid, handle, b"".join(chunks)))
    handle = storage.write_file(4, "x.keyed", iter([b"ab", b"cd"]))
    assert written == [(4, handle, b"abcd")]
    storage.backups = BackupStore(retain=1)
    storage.backups.put(BackupFile(0, 4, handle, b"abcd"))
    (tmp_path / "chk-00000004" / "x.keyed").unlink()  # type: ignore[operator]
    assert storage.read_file(handle) == b"abcd", "the copy was not read"
    storage.backups = BackupStore(retain=1)
    with pytest.raises(Exception, match="missing"):
        storage.read_file(handle)  # no copy: storage, where the file is gone
