"""Storage faults, injected by a faulty `pyarrow.fs` filesystem under the checkpoint directory
(tests/faulty_fs.py; Epochal's own code unchanged): a write that fails, a full store, a store
slower than the checkpoint timeout, a bit flipped in a file after it was written. Each is
detected; a failed checkpoint is aborted and the job goes on, its output exactly once. A
corrupt newest manifest, read back at the restore after its epoch was committed, is repaired
from its copy: the output is exact. A corrupt state file (or a manifest and its copy both)
refuses the checkpoint, and the one before it is restored; the epochs since are replayed at
their cuts where those can be read (a corrupt state file), and the sinks skip what they
committed of them: the output is exact again; where they cannot (both manifests), the job says
their committed output can come again, and nothing is lost."""

from __future__ import annotations

import collections
import logging
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from epochal import CheckpointConfig, RestartStrategy, StreamEnvironment
from epochal.errors import InjectedFailure
from epochal.testing import CollectSink, ListSource
from faulty_fs import FAULTS, faulty_filesystem

WORDS = [f"w{i % 37}" for i in range(3000)]


@pytest.fixture(autouse=True)
def _clear_faults() -> Iterator[None]:
    FAULTS.clear()
    yield
    FAULTS.clear()


def _expected() -> list[tuple[str, int]]:
    totals = collections.Counter(WORDS)
    return sorted((w, n) for w, c in totals.items() for n in range(1, c + 1))


def _run(
    tmp_path: Path, on_record: Any = None, sink: CollectSink | None = None, **checkpoint: Any
) -> tuple[Any, CollectSink]:
    config = {"interval": 0.05, "tolerable_failures": 3, **checkpoint}
    env = StreamEnvironment(
        parallelism=2,
        executor="inprocess",
        batch_size=32,
        checkpoint=CheckpointConfig(directory=str(tmp_path / "ckpt"), filesystem=faulty_filesystem(), **config),
        restart=RestartStrategy(max_restarts=3, delay=0.0),
    )

    def slowly(word: str) -> str:
        time.sleep(0.0003)  # about a second in all: room for a dozen checkpoints
        if on_record is not None:
            on_record(word)
        return word

    sink = sink or CollectSink()
    env.from_source(ListSource(WORDS, splits=2)).map(slowly).key_by(lambda w: w).count().sink_to(sink)
    return env.execute("storage-faults"), sink


@pytest.mark.parametrize("kind", ["fail", "full"])
def test_a_checkpoint_whose_writes_fail_is_aborted_and_the_job_goes_on(
    tmp_path: Path, kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    # twice: a write that cannot open its file tries again once (after creating the directory)
    fault = FAULTS.arm(kind, "chk-00000003/", times=2)
    with caplog.at_level(logging.WARNING):
        result, sink = _run(tmp_path)
    assert fault.hits, "the fault never struck"
    assert result.restarts == 0
    aborted = [r.getMessage() for r in caplog.records if "checkpoint 3 aborted" in r.getMessage()]
    assert aborted and ("injected" in aborted[0] or "No space" in aborted[0]), aborted
    assert any(c.checkpoint_id > 3 for c in result.checkpoints)  # later checkpoints complete
    assert sorted(sink.committed()) == _expected()


def test_a_store_slower_than_the_timeout_expires_the_checkpoint_and_the_job_goes_on(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    fault = FAULTS.arm("slow", "chk-00000003/", times=2, seconds=0.3)
    with caplog.at_level(logging.WARNING):
        result, sink = _run(tmp_path, timeout=0.25)
    assert fault.hits
    assert result.restarts == 0
    assert any("checkpoint 3 aborted (expired)" in r.getMessage() for r in caplog.records)
    assert sorted(sink.committed()) == _expected()


def _crash_after_commits(
    tmp_path: Path, pattern: str, times: int = 1, newest: bool = False
) -> tuple[Any, CollectSink, list[Any]]:
    """The job, crashed once three checkpoints completed and the sink committed the newest's
    epoch, with the next `times` reads of files whose path holds `pattern` (in the newest
    checkpoint's directory, with `newest`) corrupt: those of the restore that follows."""
    crashed: list[Any] = []
    sink = CollectSink()
    manifests = tmp_path / "ckpt"

    def committed_newest() -> int | None:
        complete = sorted(int(m.parent.name[4:]) for m in manifests.glob("chk-*/MANIFEST.json"))
        epochs = {checkpoint for _, _, checkpoint in sink._committed_epochs}
        return complete[-1] if len(complete) >= 3 and complete[-1] in epochs else None

    def crash_once(word: str) -> None:
        if not crashed and (committed := committed_newest()) is not None:
            where = f"chk-{committed:08d}/{pattern}" if newest else pattern
            crashed.append(FAULTS.arm("flip", where, times=times))  # the next such file read is corrupt
            raise InjectedFailure("crash")

    # a state file of its own: `merge_files=False` (the fault's flip does not reach the ranged
    # reads of a merged file's segments; tests/state/test_merged_checkpoint_files.py)
    result, _ = _run(tmp_path, on_record=crash_once, sink=sink, merge_files=pattern != ".keyed")
    assert crashed and crashed[0].hits, "the corruption never struck"
    return result, sink, crashed


def _struck(crashed: list[Any]) -> int:
    return int(crashed[0].hits[0].split("chk-")[1][:8])


def test_a_corrupt_newest_manifest_is_repaired_from_its_copy_and_the_output_is_exact(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING):
        result, sink, crashed = _crash_after_commits(tmp_path, "MANIFEST.json")
    struck = _struck(crashed)
    messages = [r.getMessage() for r in caplog.records]
    assert any(f"chk-{struck:08d}/MANIFEST.json was corrupt" in m and "repaired" in m for m in messages), messages
    assert result.restored_from[-1] == struck  # restored, not refused
    assert sorted(sink.committed()) == _expected()  # exact: nothing lost, nothing twice


def test_a_corrupt_checkpoint_is_refused_and_its_epochs_replayed_at_their_cuts_so_the_output_is_exact(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A bit flips in a state file of the newest checkpoint (read back at the restore after a
    crash, after its epoch was committed): the checkpoint is refused, the one before it
    restored, and the refused one's epoch replayed at its cut and skipped by the sink."""
    with caplog.at_level(logging.WARNING):
        result, sink, crashed = _crash_after_commits(tmp_path, ".keyed")
    struck = _struck(crashed)
    messages = [r.getMessage() for r in caplog.records]
    refused = re.compile(rf"checkpoint(\(s\))? \[?{struck}\]? refused")
    assert any(refused.search(m) for m in messages), messages  # which, and (in the message) why
    restored = [c for c in result.restored_from if c is not None]
    assert restored and restored[-1] < struck  # the one before it
    assert any(f"replaying the epochs of checkpoint(s) [{struck}] at their cuts" in m for m in messages), messages
    assert any(c.checkpoint_id == struck for c in result.checkpoints)  # written anew by the replay
    assert sorted(sink.committed()) == _expected()  # exact: the replayed epoch was skipped, not committed twice


def test_a_checkpoint_whose_manifest_and_copy_are_corrupt_is_refused_and_nothing_is_lost(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING):
        # every read of the newest checkpoint's manifest and copy corrupt: damaged on disk, both
        result, sink, crashed = _crash_after_commits(tmp_path, "MANIFEST", times=1000, newest=True)
    struck = _struck(crashed)
    messages = [r.getMessage() for r in caplog.records]
    restored = [c for c in result.restored_from if c is not None]
    assert restored and restored[-1] < struck
    assert any(f"restoring checkpoint {restored[-1]}" in m and "can appear twice" in m for m in messages), messages
    assert set(sink.committed()) == set(_expected())  # nothing lost; the lost cut's epoch may come twice (said)


def test_a_filesystem_that_is_not_one_is_refused() -> None:
    with pytest.raises(TypeError, match="CheckpointConfig.filesystem"):
        CheckpointConfig(directory="ckpt", filesystem="s3://bucket")
