"""Tests of `epochal.state.storage`: checkpoint directories, atomic writes, and integrity (what
resolving a checkpoint checks, and what reading a file verifies). The manifest codec is in
test_manifest.py, retention in test_retention.py."""

from __future__ import annotations

import dataclasses
import logging
import os
import pickle
import tempfile
from pathlib import Path
from typing import Any

import pyarrow.fs as pafs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from epochal.errors import CheckpointError, CorruptCheckpointError, NoCheckpointError
from epochal.state.manifest import FileHandle, Manifest, OperatorState, SubtaskState, TaskCheckpointStats
from epochal.state.storage import MANIFEST_COPY_NAME, MANIFEST_NAME, CheckpointStorage
from epochal.state.verify import verify_checkpoint


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
    assert names == [MANIFEST_COPY_NAME, MANIFEST_NAME, "count-0.keyed", "count-1.keyed", "source-0.op"]


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
def test_a_flipped_data_byte_is_detected_where_the_file_is_read_not_at_resolve(data) -> None:  # noqa: ANN001
    with tempfile.TemporaryDirectory() as tmp:
        storage = CheckpointStorage(tmp)
        write_checkpoint(storage, 1)
        newest = write_checkpoint(storage, 2)
        handle = data.draw(st.sampled_from(list(newest.files())), label="file")
        pos = data.draw(st.integers(min_value=0, max_value=handle.size - 1), label="pos")
        mask = data.draw(st.integers(min_value=1, max_value=255), label="mask")
        _flip(data_path(storage, handle), pos, mask)
        # resolving reads no data bytes: the size is right, so the checkpoint resolves
        assert storage.latest() == newest
        assert storage.resolve(2) == newest
        # the bytes are verified where they are read, and the error names checkpoint and file
        expected = f"checkpoint 2: {handle.path}: checksum mismatch"
        with pytest.raises(CorruptCheckpointError, match=expected):
            storage.read_file(handle)
        with pytest.raises(CorruptCheckpointError, match=expected):
            verify_checkpoint(storage, newest)


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
    # and through the storage, for a sample of positions (each round trip touches the disk), the
    # copy lost too (with it, each would be repaired: `test_a_corrupt_manifest_is_repaired_from_its_copy`)
    path.with_name(MANIFEST_COPY_NAME).unlink()
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
    # A flip that JSON reads as the same value (`0.0` as `0e0`) changes nothing; any other is
    # caught: the manifest read back is never a different one.
    with tempfile.TemporaryDirectory() as tmp:
        storage = CheckpointStorage(tmp)
        write_checkpoint(storage, 1)
        newest = write_checkpoint(storage, 2)
        path = manifest_path(storage, 2)
        path.with_name(MANIFEST_COPY_NAME).unlink()  # no copy to repair it from
        size = path.stat().st_size
        pos = data.draw(st.integers(min_value=0, max_value=size - 1), label="pos")
        mask = data.draw(st.integers(min_value=1, max_value=255), label="mask")
        original = _flip(path, pos, mask)
        try:
            loaded = storage.resolve(2)
        except CorruptCheckpointError:
            assert storage.latest().checkpoint_id == 1
        else:
            assert dataclasses.astuple(loaded) == dataclasses.astuple(newest)
            assert chr(original[pos]) == "." and chr(original[pos] ^ mask) in "eE"


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
    assert storage.latest() == newest  # repaired from its copy
    assert path.read_bytes() == original
    path.write_bytes(original[: len(original) // 2])
    path.with_name(MANIFEST_COPY_NAME).write_bytes(original[:10])
    assert storage.latest() == previous


def test_an_appended_byte_is_detected(storage: CheckpointStorage) -> None:
    previous = write_checkpoint(storage, 1)
    newest = write_checkpoint(storage, 2)
    handle = next(iter(newest.files()))
    path = data_path(storage, handle)
    path.write_bytes(path.read_bytes() + b"\0")
    assert storage.latest() == previous
    with pytest.raises(CorruptCheckpointError, match=f"checkpoint 2: {handle.path} has {handle.size + 1} bytes"):
        storage.resolve(2)


def test_a_missing_data_file_is_detected(storage: CheckpointStorage) -> None:
    previous = write_checkpoint(storage, 1)
    newest = write_checkpoint(storage, 2)
    handle = next(iter(newest.files()))
    data_path(storage, handle).unlink()
    assert storage.latest() == previous
    with pytest.raises(CorruptCheckpointError, match=f"checkpoint 2: {handle.path} is missing"):
        storage.resolve(2)
    with pytest.raises(CorruptCheckpointError, match=f"checkpoint 2: {handle.path}: missing"):
        storage.read_file(handle)


def test_corrupt_checkpoints_are_skipped_with_a_warning(
    storage: CheckpointStorage, caplog: pytest.LogCaptureFixture
) -> None:
    write_checkpoint(storage, 1)
    write_checkpoint(storage, 2)
    manifest_path(storage, 2).write_bytes(b"not json")
    manifest_path(storage, 2).with_name(MANIFEST_COPY_NAME).write_bytes(b"nor this")
    with caplog.at_level(logging.WARNING, logger="epochal.state.storage"):
        assert storage.latest().checkpoint_id == 1
    assert "skipping corrupt checkpoint 2" in caplog.text


def test_a_corrupt_manifest_is_repaired_from_its_copy(
    storage: CheckpointStorage, caplog: pytest.LogCaptureFixture
) -> None:
    write_checkpoint(storage, 1)
    newest = write_checkpoint(storage, 2)
    path = manifest_path(storage, 2)
    original = path.read_bytes()
    _flip(path, len(original) // 2, 0x04)
    with caplog.at_level(logging.WARNING, logger="epochal.state"):
        assert storage.resolve(2) == newest
    assert "repaired from MANIFEST.copy.json" in caplog.text
    assert path.read_bytes() == original  # written back: the next read needs no copy
    assert storage.latest() == newest


def test_a_copy_alone_does_not_complete_a_checkpoint_and_goes_with_its_manifest(storage: CheckpointStorage) -> None:
    write_checkpoint(storage, 1)
    write_checkpoint(storage, 2)
    manifest_path(storage, 2).unlink()  # as if the writer died between the copy and the manifest
    assert storage.complete_checkpoints() == [1] and storage.latest().checkpoint_id == 1
    storage.delete_manifest(1)
    assert not manifest_path(storage, 1).with_name(MANIFEST_COPY_NAME).exists()


def test_all_checkpoints_corrupt_means_none(storage: CheckpointStorage) -> None:
    newest = write_checkpoint(storage, 1)
    path = data_path(storage, next(iter(newest.files())))
    path.write_bytes(path.read_bytes()[:-1])
    assert storage.latest() is None
    with pytest.raises(NoCheckpointError):
        storage.resolve("latest")




def test_latest_before_falls_back_past_a_refused_checkpoint(storage: CheckpointStorage) -> None:
    first, second = write_checkpoint(storage, 1), write_checkpoint(storage, 2)
    write_checkpoint(storage, 3, complete=False)
    newest = write_checkpoint(storage, 4)
    assert storage.latest() == newest
    assert storage.latest(before=4) == second
    assert storage.latest(before=3) == second
    assert storage.latest(before=2) == first
    assert storage.latest(before=1) is None
    # a checkpoint that fails the cheap check is skipped on the way down too
    handle = next(iter(second.files()))
    data_path(storage, handle).unlink()
    assert storage.latest(before=4) == first


# -- what resolving reads -------------------------------------------------------------------------
class _CountingFileSystem:
    """A pyarrow filesystem's stand-in that counts the bytes read from each path."""

    def __init__(self, fs: pafs.FileSystem) -> None:
        self._fs = fs
        self.bytes_read: dict[str, int] = {}

    def __getattr__(self, name: str) -> Any:
        return getattr(self._fs, name)

    def open_input_stream(self, path: str) -> Any:
        stream, counts = self._fs.open_input_stream(path), self.bytes_read

        class Counting:
            def __enter__(self) -> Counting:
                return self

            def __exit__(self, *exc: object) -> None:
                stream.close()

            def read(self, size: int | None = None) -> bytes:
                data = stream.read() if size is None else stream.read(size)
                counts[path] = counts.get(path, 0) + len(data)
                return bytes(data)

        return Counting()


def test_resolving_reads_manifests_only_and_a_restore_reads_each_file_once(storage: CheckpointStorage) -> None:
    write_checkpoint(storage, 1)
    newest = write_checkpoint(storage, 2)
    counting = _CountingFileSystem(storage.fs)
    storage.fs = counting  # type: ignore[assignment]
    assert storage.latest() == newest
    assert storage.resolve("latest") == newest
    assert storage.resolve(2) == newest
    assert storage.resolve(storage.checkpoint_path(1)).checkpoint_id == 1
    assert storage.latest(before=2).checkpoint_id == 1
    assert counting.bytes_read and all(path.endswith(MANIFEST_NAME) for path in counting.bytes_read)

    counting.bytes_read.clear()
    for handle in newest.files():  # what a restore does
        storage.read_file(handle)
    assert counting.bytes_read == {str(data_path(storage, h)): h.size for h in newest.files()}
    counting.bytes_read.clear()
    verify_checkpoint(storage, newest)  # the explicit check reads every byte, for the CLI and tests
    assert counting.bytes_read == {str(data_path(storage, h)): h.size for h in newest.files()}


# -- atomic writes --------------------------------------------------------------------------------
def test_a_file_is_never_visible_under_its_name_half_written(storage: CheckpointStorage) -> None:
    def chunks():  # noqa: ANN202
        yield b"first half"
        raise ValueError("a value that does not pickle")

    with pytest.raises(ValueError):
        storage.write_file(5, "x.keyed", chunks())
    assert os.listdir(storage.checkpoint_path(5)) == []  # neither the file nor its temporary
    handle = storage.write_file(5, "x.keyed", iter([b"a", b"b"]))
    assert storage.read_file(handle) == b"ab"
    assert os.listdir(storage.checkpoint_path(5)) == ["x.keyed"]


def test_a_failed_write_raises_checkpoint_error_and_leaves_nothing(storage: CheckpointStorage) -> None:
    blocker = Path(storage.checkpoint_path(6))
    blocker.write_bytes(b"a file where the checkpoint's directory belongs")
    with pytest.raises(CheckpointError, match="cannot write chk-00000006/x.keyed"):
        storage.write_file(6, "x.keyed", b"data")
    assert blocker.read_bytes().startswith(b"a file")
