"""Tests of `epochal.state.retention`: which checkpoints stay, and when a shared file goes."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_storage import write_checkpoint

from epochal.state.manifest import FileHandle, Manifest, OperatorState, SubtaskState
from epochal.state.retention import Retention
from epochal.state.storage import CheckpointStorage
from epochal.state.verify import verify_checkpoint


@pytest.fixture
def storage(tmp_path: Path) -> CheckpointStorage:
    return CheckpointStorage(str(tmp_path / "ckpt"))


def chained_checkpoint(
    storage: CheckpointStorage, checkpoint_id: int, base: tuple[FileHandle, ...], complete: bool = True
) -> Manifest:
    """One subtask whose keyed chain is `base` plus a file new in this checkpoint."""
    kind = "delta" if base else "full"
    own = storage.write_file(checkpoint_id, f"count-0.{kind}", f"{kind} {checkpoint_id}".encode())
    manifest = Manifest(
        checkpoint_id, "job", 0.0, 0.0, (OperatorState("count", 1, 128, (SubtaskState(0, 0, 128, own, None, base),)),)
    )
    if complete:
        storage.write_manifest(manifest)
    return manifest


def exists(storage: CheckpointStorage, handle: FileHandle) -> bool:
    return (Path(storage.root) / handle.path).is_file()


def test_retain_keeps_the_newest_complete_and_drops_older_incomplete(storage: CheckpointStorage) -> None:
    for cid, complete in [(1, True), (2, False), (3, True), (4, True), (5, False), (6, True), (7, False)]:
        write_checkpoint(storage, cid, complete=complete)
    storage.retain(2, newest_complete=6)
    # 4 and 6 are the newest two complete ones; 7 is newer than the newest complete (in flight)
    assert storage.checkpoint_ids() == [4, 6, 7]
    assert storage.complete_checkpoints() == [4, 6]
    assert storage.latest().checkpoint_id == 6


def test_retain_keeps_what_an_in_flight_checkpoint_builds_on(storage: CheckpointStorage) -> None:
    """Checkpoint 3 was triggered when 1 was the newest complete one (its deltas reference 1's
    files); 2 completes first. Dropping 1 now would leave 3 pointing at deleted files."""
    for cid in (1, 2, 4):
        write_checkpoint(storage, cid)
    storage.retain(1, newest_complete=2, in_flight_base=1)
    assert storage.complete_checkpoints() == [1, 2, 4]
    storage.retain(1, newest_complete=4)  # nothing in flight any more: back to `keep`
    assert storage.complete_checkpoints() == [4]


def test_a_shared_file_goes_exactly_when_its_last_referencing_manifest_goes(storage: CheckpointStorage) -> None:
    full = chained_checkpoint(storage, 1, ())
    (f1,) = full.files()
    m2 = chained_checkpoint(storage, 2, (f1,))
    d2 = m2.operators[0].subtasks[0].keyed
    m3 = chained_checkpoint(storage, 3, (f1, d2))
    d3 = m3.operators[0].subtasks[0].keyed
    storage.retain(1, newest_complete=3)
    # 1 and 2 lose their manifests, but 3's chain still lists their files
    assert storage.complete_checkpoints() == [3]
    assert storage.checkpoint_ids() == [1, 2, 3]
    assert all(exists(storage, h) for h in (f1, d2, d3))
    retention = storage._retention
    assert retention is not None and retention.references(f1.path) == 1

    # a chain that shares only the full file: 2's delta goes now, 1's full file stays
    m4 = chained_checkpoint(storage, 4, (f1,))
    assert retention.references(f1.path) == 2
    storage.retain(1, newest_complete=4)
    assert storage.complete_checkpoints() == [4]
    assert exists(storage, f1) and not exists(storage, d2) and not exists(storage, d3)
    assert storage.checkpoint_ids() == [1, 4]  # 2 and 3 held no listed file any more: gone whole

    # a new full file: nothing lists 1's file any more, and its directory goes with it
    chained_checkpoint(storage, 5, ())
    storage.retain(1, newest_complete=5)
    assert storage.checkpoint_ids() == [5]
    assert not exists(storage, f1) and not any(exists(storage, h) for h in m4.files())
    assert retention.references(f1.path) == 0


def test_never_a_file_a_pending_checkpoint_builds_on(storage: CheckpointStorage) -> None:
    (f1,) = chained_checkpoint(storage, 1, ()).files()
    (f2,) = chained_checkpoint(storage, 2, ()).files()
    # checkpoint 3 is in flight, building on 1; 2 completed meanwhile, and keep is 1
    pending = chained_checkpoint(storage, 3, (f1,), complete=False)
    storage.retain(1, newest_complete=2, in_flight_base=1)
    assert exists(storage, f1) and exists(storage, f2)
    storage.write_manifest(pending)  # its base is still there, so it completes
    storage.retain(1, newest_complete=3)
    assert storage.complete_checkpoints() == [3]
    assert exists(storage, f1) and not exists(storage, f2)
    assert storage.checkpoint_ids() == [1, 3]


def test_counts_are_built_once_and_dropping_reloads_no_manifest(
    storage: CheckpointStorage, monkeypatch: pytest.MonkeyPatch
) -> None:
    for cid in range(1, 5):
        write_checkpoint(storage, cid)
    loads: list[int] = []
    load = storage.load_manifest
    monkeypatch.setattr(storage, "load_manifest", lambda cid: loads.append(cid) or load(cid))
    storage.retain(2, newest_complete=4)
    assert sorted(loads) == [1, 2, 3, 4]  # built once, from the manifests on disk
    loads.clear()
    for cid in range(5, 9):
        write_checkpoint(storage, cid)
        storage.retain(2, newest_complete=cid)
    assert loads == []  # kept up to date in memory from here on
    assert storage.complete_checkpoints() == [7, 8]


def test_a_new_retention_sees_what_an_earlier_run_left(storage: CheckpointStorage) -> None:
    (f1,) = chained_checkpoint(storage, 1, ()).files()
    chained_checkpoint(storage, 2, (f1,))
    storage.retain(1, newest_complete=2)
    assert storage.complete_checkpoints() == [2] and exists(storage, f1)
    # the job restarts: a new storage object, new counts from the manifests on disk
    again = CheckpointStorage(storage.uri)
    chained_checkpoint(again, 3, ())
    again.retain(1, newest_complete=3)
    assert again.checkpoint_ids() == [3] and not exists(again, f1)


def test_an_unreadable_manifest_counts_towards_keep_but_protects_nothing(storage: CheckpointStorage) -> None:
    for cid in (1, 2, 3):
        write_checkpoint(storage, cid)
    (Path(storage.checkpoint_path(2)) / "MANIFEST.json").write_bytes(b"not json")
    retention = Retention(storage)
    assert retention.complete() == [1, 2, 3]
    retention.retain(2, newest_complete=3)
    assert storage.checkpoint_ids() == [2, 3]


def test_discard_of_a_missing_checkpoint_is_harmless(storage: CheckpointStorage) -> None:
    write_checkpoint(storage, 1)
    storage.discard(99)
    storage.discard(1)
    assert storage.checkpoint_ids() == []


@given(
    st.lists(st.booleans(), min_size=1, max_size=8),
    st.integers(min_value=1, max_value=4),
)
@settings(max_examples=40, deadline=None)
def test_retain_property(completeness: list[bool], keep: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        storage = CheckpointStorage(tmp)
        ids = list(range(1, len(completeness) + 1))
        for cid, complete in zip(ids, completeness, strict=True):
            write_checkpoint(storage, cid, complete=complete, payload=b"x")
        complete_ids = [cid for cid, c in zip(ids, completeness, strict=True) if c]
        if not complete_ids:
            return
        newest = complete_ids[-1]
        storage.retain(keep, newest)
        expected = sorted(set(complete_ids[-keep:]) | {cid for cid in ids if cid > newest})
        assert storage.checkpoint_ids() == expected


@given(st.lists(st.tuples(st.booleans(), st.booleans()), min_size=1, max_size=10), st.integers(1, 3))
@settings(max_examples=40, deadline=None)
def test_every_kept_checkpoint_stays_restorable_and_nothing_unlisted_stays(
    steps: list[tuple[bool, bool]], keep: int
) -> None:
    """Chains that go on or start afresh; after each retain, every complete checkpoint's files
    are all there, and every data file left is listed by a complete checkpoint."""
    with tempfile.TemporaryDirectory() as tmp:
        storage = CheckpointStorage(tmp)
        chain: tuple[FileHandle, ...] = ()
        manifests: dict[int, Manifest] = {}
        for cid, (fresh, base_pending) in enumerate(steps, start=1):
            if fresh:
                chain = ()
            manifest = chained_checkpoint(storage, cid, chain)
            manifests[cid] = manifest
            chain = manifest.operators[0].subtasks[0].keyed_chain()
            base = cid - 1 if base_pending and cid > 1 else None
            storage.retain(keep, cid, base)
            complete = storage.complete_checkpoints()
            listed = {h.path for c in complete for h in manifests[c].files()}
            for c in complete:
                verify_checkpoint(storage, manifests[c])
            pair = ("MANIFEST.json", "MANIFEST.copy.json")
            on_disk = {str(p.relative_to(tmp)) for p in Path(tmp).rglob("*") if p.is_file() and p.name not in pair}
            assert on_disk == listed
