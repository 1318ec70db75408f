"""Tests of `epochal.state.storage`: checkpoint directories, manifests, integrity, retention."""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import pickle
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from epochal.errors import CheckpointError, CorruptCheckpointError, NoCheckpointError
from epochal.state.storage import (
    MANIFEST_NAME,
    CheckpointStorage,
    FileHandle,
    Manifest,
    OperatorState,
    SubtaskState,
    TaskCheckpointStats,
)


def write_checkpoint(
    storage: CheckpointStorage, checkpoint_id: int, complete: bool = True, payload: bytes | None = None
) -> Manifest:
    """A checkpoint of one two-subtask operator: a keyed file per subtask, an operator file on one."""
    payload = payload if payload is not None else f"state of checkpoint {checkpoint_id}".encode() * 3
    k0 = storage.write_file(checkpoint_id, "count-0.keyed", payload + b"/0")
    k1 = storage.write_file(checkpoint_id, "count-1.keyed", payload + b"/1")
    op0 = storage.write_file(checkpoint_id, "source-0.op", b"positions " + payload)
    manifest = Manifest(
        checkpoint_id=checkpoint_id,
        job_name="job",
        created_at=1700000000.25 + checkpoint_id,
        duration_ms=12.5,
        operators=(
            OperatorState("source", 1, 128, (SubtaskState(0, 0, 128, None, op0),)),
            OperatorState("count", 2, 128, (SubtaskState(0, 0, 64, k0, None), SubtaskState(1, 64, 128, k1, None))),
        ),
        tasks=(TaskCheckpointStats("v0[0]", 0.0, 0.5, 1.5, k0.size + k1.size + op0.size),),
        is_final=False,
    )
    if complete:
        storage.write_manifest(manifest)
    return manifest


def manifest_path(storage: CheckpointStorage, checkpoint_id: int) -> Path:
    return Path(storage.checkpoint_path(checkpoint_id)) / MANIFEST_NAME


def data_path(storage: CheckpointStorage, handle: FileHandle) -> Path:
    return Path(storage.root) / handle.path


@pytest.fixture
def storage(tmp_path: Path) -> CheckpointStorage:
    return CheckpointStorage(str(tmp_path / "ckpt"))


# -- writing and reading --------------------------------------------------------------------------
def test_write_file_returns_a_verifiable_handle(storage: CheckpointStorage) -> None:
    handle = storage.write_file(3, "x.keyed", b"hello")
    assert handle.path == "chk-00000003/x.keyed" and handle.size == 5
    assert handle.sha256 == "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824"
    assert storage.read_file(handle) == b"hello"
    assert data_path(storage, handle).read_bytes() == b"hello"


def test_latest_returns_the_newest_complete_checkpoint(storage: CheckpointStorage) -> None:
    assert storage.latest() is None
    for cid in (1, 2, 5):
        write_checkpoint(storage, cid)
    written = write_checkpoint(storage, 7)
    assert storage.latest() == written
    assert storage.resolve("latest") == written
    assert storage.resolve(7) == written
    assert storage.resolve(storage.checkpoint_path(7)) == written
    assert storage.resolve("chk-00000002/").checkpoint_id == 2


def test_a_checkpoint_without_manifest_is_not_complete(storage: CheckpointStorage) -> None:
    older = write_checkpoint(storage, 1)
    write_checkpoint(storage, 2, complete=False)
    # a leftover temporary manifest (a crash between write and rename) does not count either
    manifest_path(storage, 2).with_name(f".{MANIFEST_NAME}.deadbeef.tmp").write_bytes(b"{}")
    assert storage.checkpoint_ids() == [1, 2]
    assert storage.complete_checkpoints() == [1]
    assert not storage.has_manifest(2)
    assert storage.latest() == older
    with pytest.raises(NoCheckpointError):
        storage.resolve(2)


def test_resolve_without_any_complete_checkpoint_raises(storage: CheckpointStorage) -> None:
    write_checkpoint(storage, 1, complete=False)
    with pytest.raises(NoCheckpointError):
        storage.resolve("latest")
    with pytest.raises(NoCheckpointError):
        storage.resolve("/some/where/else")
    with pytest.raises(NoCheckpointError):
        storage.resolve(42)


def test_checkpoint_ids_ignore_foreign_entries(storage: CheckpointStorage) -> None:
    write_checkpoint(storage, 4)
    root = Path(storage.root)
    (root / "chk-abc").mkdir()
    (root / "other").mkdir()
    (root / "chk-00000009").write_bytes(b"a file, not a directory")
    assert storage.checkpoint_ids() == [4]


def test_manifest_is_written_atomically_without_leftovers(storage: CheckpointStorage) -> None:
    write_checkpoint(storage, 1)
    names = sorted(os.listdir(storage.checkpoint_path(1)))
    assert names == [MANIFEST_NAME, "count-0.keyed", "count-1.keyed", "source-0.op"]


def test_storage_survives_pickling(storage: CheckpointStorage) -> None:
    write_checkpoint(storage, 1)
    clone = pickle.loads(pickle.dumps(storage))
    assert clone.root == storage.root
    assert clone.latest() == storage.latest()


def test_an_uncreatable_root_raises_checkpoint_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_bytes(b"")
    with pytest.raises(CheckpointError):
        CheckpointStorage(str(blocker / "ckpt"))


# -- integrity ------------------------------------------------------------------------------------
def _flip(path: Path, pos: int, mask: int) -> bytes:
    original = path.read_bytes()
    corrupted = bytearray(original)
    corrupted[pos] ^= mask
    path.write_bytes(bytes(corrupted))
    return original


@given(st.data())
@settings(max_examples=60, deadline=None)
def test_any_flipped_byte_of_a_data_file_is_detected(data) -> None:  # noqa: ANN001
    with tempfile.TemporaryDirectory() as tmp:
        storage = CheckpointStorage(tmp)
        previous = write_checkpoint(storage, 1)
        newest = write_checkpoint(storage, 2)
        handle = data.draw(st.sampled_from(list(newest.files())), label="file")
        pos = data.draw(st.integers(min_value=0, max_value=handle.size - 1), label="pos")
        mask = data.draw(st.integers(min_value=1, max_value=255), label="mask")
        _flip(data_path(storage, handle), pos, mask)
        assert storage.latest() == previous
        with pytest.raises(CorruptCheckpointError):
            storage.resolve(2)
        with pytest.raises(CorruptCheckpointError):
            storage.read_file(handle)


def test_any_flipped_bit_of_the_manifest_is_detected(storage: CheckpointStorage) -> None:
    previous = write_checkpoint(storage, 1)
    write_checkpoint(storage, 2)
    path = manifest_path(storage, 2)
    original = path.read_bytes()
    for pos in range(len(original)):
        for bit in range(8):
            corrupted = bytearray(original)
            corrupted[pos] ^= 1 << bit
            with pytest.raises(CorruptCheckpointError):
                Manifest.from_json(bytes(corrupted), source="m")
    # and through the storage, for a sample of positions (each round trip touches the disk)
    for pos in range(0, len(original), max(1, len(original) // 40)):
        _flip(path, pos, 0x01)
        assert storage.latest() == previous
        with pytest.raises(CorruptCheckpointError):
            storage.resolve(2)
        path.write_bytes(original)
    assert storage.latest().checkpoint_id == 2


@given(st.data())
@settings(max_examples=60, deadline=None)
def test_any_flipped_byte_of_the_manifest_is_detected_or_harmless(data) -> None:  # noqa: ANN001
    # A flip that JSON ignores (one whitespace byte for another) changes nothing; any other is
    # caught: the manifest read back is never a different one.
    with tempfile.TemporaryDirectory() as tmp:
        storage = CheckpointStorage(tmp)
        write_checkpoint(storage, 1)
        newest = write_checkpoint(storage, 2)
        path = manifest_path(storage, 2)
        size = path.stat().st_size
        pos = data.draw(st.integers(min_value=0, max_value=size - 1), label="pos")
        mask = data.draw(st.integers(min_value=1, max_value=255), label="mask")
        original = _flip(path, pos, mask)
        try:
            loaded = storage.resolve(2)
        except CorruptCheckpointError:
            assert storage.latest().checkpoint_id == 1
        else:
            assert loaded == newest
            assert chr(original[pos]) in " \n\t\r" and chr(original[pos] ^ mask) in " \n\t\r"


def test_truncated_files_are_detected(storage: CheckpointStorage) -> None:
    previous = write_checkpoint(storage, 1)
    newest = write_checkpoint(storage, 2)
    for handle in newest.files():
        path = data_path(storage, handle)
        original = path.read_bytes()
        for cut in (0, 1, len(original) // 2, len(original) - 1):
            path.write_bytes(original[:cut])
            assert storage.latest() == previous
            with pytest.raises(CorruptCheckpointError):
                storage.resolve(2)
        path.write_bytes(original)
    path = manifest_path(storage, 2)
    original = path.read_bytes()
    for cut in range(len(original)):
        with pytest.raises(CorruptCheckpointError):
            Manifest.from_json(original[:cut], source="m")
    path.write_bytes(original[: len(original) // 2])
    assert storage.latest() == previous


def test_an_appended_byte_is_detected(storage: CheckpointStorage) -> None:
    previous = write_checkpoint(storage, 1)
    newest = write_checkpoint(storage, 2)
    handle = next(iter(newest.files()))
    path = data_path(storage, handle)
    path.write_bytes(path.read_bytes() + b"\0")
    assert storage.latest() == previous


def test_a_missing_data_file_is_detected(storage: CheckpointStorage) -> None:
    previous = write_checkpoint(storage, 1)
    newest = write_checkpoint(storage, 2)
    data_path(storage, next(iter(newest.files()))).unlink()
    assert storage.latest() == previous
    with pytest.raises(CorruptCheckpointError):
        storage.resolve(2)


def test_corrupt_checkpoints_are_skipped_with_a_warning(
    storage: CheckpointStorage, caplog: pytest.LogCaptureFixture
) -> None:
    write_checkpoint(storage, 1)
    write_checkpoint(storage, 2)
    manifest_path(storage, 2).write_bytes(b"not json")
    with caplog.at_level(logging.WARNING, logger="epochal.state.storage"):
        assert storage.latest().checkpoint_id == 1
    assert "skipping corrupt checkpoint 2" in caplog.text


def test_all_checkpoints_corrupt_means_none(storage: CheckpointStorage) -> None:
    newest = write_checkpoint(storage, 1)
    _flip(data_path(storage, next(iter(newest.files()))), 0, 0xFF)
    assert storage.latest() is None
    with pytest.raises(NoCheckpointError):
        storage.resolve("latest")


# -- retention ------------------------------------------------------------------------------------
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


@given(
    st.lists(st.booleans(), min_size=1, max_size=8),
    st.integers(min_value=1, max_value=4),
)
@settings(max_examples=40, deadline=None)
def test_retain_property(completeness: list[bool], keep: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        storage = CheckpointStorage(tmp)
        ids = list(range(1, len(completeness) + 1))
        for cid, complete in zip(ids, completeness):
            write_checkpoint(storage, cid, complete=complete, payload=b"x")
        complete_ids = [cid for cid, c in zip(ids, completeness) if c]
        if not complete_ids:
            return
        newest = complete_ids[-1]
        storage.retain(keep, newest)
        expected = sorted(set(complete_ids[-keep:]) | {cid for cid in ids if cid > newest})
        assert storage.checkpoint_ids() == expected


def test_discard_of_a_missing_checkpoint_is_harmless(storage: CheckpointStorage) -> None:
    write_checkpoint(storage, 1)
    storage.discard(99)
    storage.discard(1)
    assert storage.checkpoint_ids() == []


# -- manifest JSON --------------------------------------------------------------------------------
names = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=12)
finite = st.floats(allow_nan=False, allow_infinity=False)
handles = st.builds(FileHandle, names, st.integers(min_value=0, max_value=2**40), st.text("0123456789abcdef", min_size=64, max_size=64))
subtasks = st.builds(
    SubtaskState,
    st.integers(min_value=0, max_value=64),
    st.integers(min_value=0, max_value=128),
    st.integers(min_value=0, max_value=128),
    st.none() | handles,
    st.none() | handles,
)
operators = st.builds(
    OperatorState,
    names,
    st.integers(min_value=1, max_value=64),
    st.integers(min_value=1, max_value=32768),
    st.lists(subtasks, max_size=3).map(tuple),
)
manifests = st.builds(
    Manifest,
    checkpoint_id=st.integers(min_value=1, max_value=2**40),
    job_name=names,
    created_at=finite,
    duration_ms=finite,
    operators=st.lists(operators, max_size=3).map(tuple),
    tasks=st.lists(st.builds(TaskCheckpointStats, names, finite, finite, finite, st.integers(min_value=0)), max_size=3).map(tuple),
    is_final=st.booleans(),
)


@given(manifests)
@settings(max_examples=100)
def test_manifest_json_round_trips(manifest: Manifest) -> None:
    assert Manifest.from_json(manifest.to_json(), source="m") == manifest
    # the body is the dataclass fields, as `asdict` gives them: the format stays readable
    body = json.loads(manifest.to_json())["manifest"]
    expected = json.loads(json.dumps(dataclasses.asdict(manifest)))
    del expected["location"]
    assert body == {**expected, "format_version": 2}


def test_manifest_helpers() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        manifest = write_checkpoint(CheckpointStorage(tmp), 1)
    assert manifest.operator("count").parallelism == 2
    assert manifest.operator("nope") is None
    assert [h.path for h in manifest.files()] == [
        "chk-00000001/source-0.op",
        "chk-00000001/count-0.keyed",
        "chk-00000001/count-1.keyed",
    ]
    assert manifest.size == manifest.tasks[0].bytes


def test_manifest_of_an_unknown_format_version_is_rejected() -> None:
    import hashlib
    import json

    body = json.loads(Manifest(1, "j", 0.0, 0.0, ()).to_json())["manifest"]
    body["format_version"] = 99
    payload = json.dumps(body, sort_keys=True, separators=(",", ":"))
    forged = json.dumps({"manifest": body, "sha256": hashlib.sha256(payload.encode()).hexdigest()}).encode()
    with pytest.raises(CorruptCheckpointError, match="format"):
        Manifest.from_json(forged, source="m")
