"""Storage faults, injected by a faulty `pyarrow.fs` filesystem under the checkpoint directory
(tests/faulty_fs.py; Epochal's own code unchanged): a write that fails, a full store, a store
slower than the checkpoint timeout, a bit flipped in a file after it was written. Each is
detected; a failed checkpoint is aborted and the job goes on, its output exactly once; a
corrupt checkpoint is refused, the one before it restored, and the job says which and why, and
that the refused checkpoint's committed output can come again (nothing is lost)."""

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


def _run(tmp_path: Path, on_record: Any = None, **checkpoint: Any) -> tuple[Any, CollectSink]:
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

    sink = CollectSink()
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


@pytest.mark.parametrize("target", ["MANIFEST.json", ".keyed"])
def test_a_corrupt_checkpoint_is_refused_and_the_one_before_is_restored(
    tmp_path: Path, target: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A bit flips in a checkpoint's manifest or state file (read back at the restore after a
    crash): the checkpoint is refused, the one before it restored, and the log says so."""
    crashed: list[Any] = []

    def crash_once(word: str) -> None:
        if not crashed and word == "w5" and len(list((tmp_path / "ckpt").glob("chk-*/MANIFEST.json"))) >= 3:
            crashed.append(FAULTS.arm("flip", target, times=1))  # the next such file read is corrupt
            raise InjectedFailure("crash")

    with caplog.at_level(logging.WARNING):
        # a state file of its own: `merge_files=False` (the fault's flip does not reach the
        # ranged reads of a merged file's segments; tests/state/test_merged_checkpoint_files.py)
        result, sink = _run(tmp_path, on_record=crash_once, merge_files=target != ".keyed")
    assert crashed and crashed[0].hits, "the corruption never struck"
    struck = int(crashed[0].hits[0].split("chk-")[1][:8])
    messages = [r.getMessage() for r in caplog.records]
    refused = re.compile(rf"checkpoint(\(s\))? \[?{struck}\]? refused")
    assert any(refused.search(m) for m in messages), messages  # which, and (in the message) why
    restored = [c for c in result.restored_from if c is not None]
    assert restored and restored[-1] < struck  # the one before it
    assert any(f"restoring checkpoint {restored[-1]}" in m and "can appear twice" in m for m in messages), messages
    # nothing lost; what the refused checkpoint's epoch committed may come again (said above)
    committed = collections.Counter(sink.committed())
    assert set(committed) == set(_expected())


def test_a_filesystem_that_is_not_one_is_refused() -> None:
    with pytest.raises(TypeError, match="CheckpointConfig.filesystem"):
        CheckpointConfig(directory="ckpt", filesystem="s3://bucket")
