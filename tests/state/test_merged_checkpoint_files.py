"""File merging (issue 42, Flink's FLIP-306): a process writes one file per checkpoint.

A job of 8 subtasks writes one merged file per checkpoint in-process, each subtask's state a
segment of it with its own checksum; `merge_files=False` writes a file per subtask and operator.
A byte flipped inside a segment, the file's size unchanged, is found by the segment's checksum.
(Restores from merged files are what every other checkpointing test runs: merging is the default.)
"""

from __future__ import annotations

from pathlib import Path

import pytest

from epochal import CheckpointConfig, StreamEnvironment
from epochal.errors import CorruptCheckpointError
from epochal.state.storage import CheckpointStorage
from epochal.state.verify import verify_checkpoint
from epochal.testing import CollectSink, ListSource

N, KEYS, PARALLELISM = 40_000, 300, 8  # long enough for several checkpoints on an idle machine


def _run(directory: Path, merge_files: bool, records: list[int]) -> CollectSink:
    sink = CollectSink()
    env = StreamEnvironment(
        parallelism=PARALLELISM, executor="inprocess",
        checkpoint=CheckpointConfig(interval=0.05, directory=str(directory), retain=1_000, merge_files=merge_files),
    )
    (env.from_source(ListSource(records, splits=PARALLELISM, batch_size=20)).key_by(lambda x: x % KEYS)
        .count().uid("count").sink_to(sink))
    env.execute("merged")
    return sink


def _own_files(storage: CheckpointStorage, checkpoint_id: int) -> list[str]:
    manifest = storage.load_manifest(checkpoint_id)
    own = f"chk-{checkpoint_id:08d}/"
    return sorted(f.path for f in manifest.stored_files() if f.path.startswith(own))


@pytest.mark.parametrize("merge_files", [True, False])
def test_a_checkpoint_is_one_file_merged_and_a_file_per_subtask_unmerged(tmp_path: Path, merge_files: bool) -> None:
    _run(tmp_path, merge_files, list(range(N)))
    storage = CheckpointStorage(str(tmp_path), create=False)
    ids = storage.complete_checkpoints()
    assert ids
    for checkpoint_id in ids:
        manifest = storage.load_manifest(checkpoint_id)
        files = _own_files(storage, checkpoint_id)
        if merge_files:
            assert len(files) == 1 and files[0].endswith(".merged")
            segments = [h for h in manifest.files() if h.path == files[0]]
            assert len(segments) >= PARALLELISM and all(h.is_segment for h in segments)
            assert [h.path for h in manifest.merged] == files
        else:
            assert len(files) >= PARALLELISM and not manifest.merged
        storage.check_files(manifest)
        verify_checkpoint(storage, manifest)


def test_a_corrupt_segment_is_found_and_not_restored_from(tmp_path: Path) -> None:
    _run(tmp_path, True, list(range(N)))
    storage = CheckpointStorage(str(tmp_path), create=False)
    ids = storage.complete_checkpoints()
    assert len(ids) >= 2
    newest = storage.load_manifest(ids[-1])
    segment = next(h for h in newest.files() if h.is_segment and h.size > 0
                   and h.path.startswith(f"chk-{ids[-1]:08d}/"))
    path = tmp_path / segment.path
    data = bytearray(path.read_bytes())
    data[(segment.offset or 0) + segment.size // 2] ^= 0xFF  # same size: only the checksums can tell
    path.write_bytes(bytes(data))
    storage.check_files(newest)  # sizes still match
    with pytest.raises(CorruptCheckpointError):
        verify_checkpoint(storage, newest)
