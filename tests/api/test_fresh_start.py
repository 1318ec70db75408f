"""Starting, resuming and starting over (issue 21): a job started without `from_checkpoint` over
a checkpoint directory with complete checkpoints is refused (`CheckpointConfig.existing`), a
directory with only incomplete ones starts again, and the start checks of sources and sinks run
once, before the first attempt, whatever the restart strategy."""

from __future__ import annotations

import collections
import os
from pathlib import Path
from typing import Any

import pytest

from epochal import (
    CheckpointConfig,
    CheckpointError,
    EpochalError,
    JobFailedError,
    RestartStrategy,
    Sink,
    SinkWriter,
    Source,
    StreamEnvironment,
)
from epochal.connectors import FileSink, TextFileSource, read_committed
from epochal.state.storage import CheckpointStorage
from epochal.testing import ListSource

WORDS = ["to", "be", "or", "not", "to", "be"]
UPDATES = collections.Counter([("to", 1), ("be", 1), ("or", 1), ("not", 1), ("to", 2), ("be", 2)])


def _env(ckpt: Path, existing: str = "error", **options: Any) -> StreamEnvironment:
    checkpoint = CheckpointConfig(directory=str(ckpt), existing=existing)  # type: ignore[arg-type]
    return StreamEnvironment(parallelism=2, executor="inprocess", checkpoint=checkpoint, **options)


def _run(ckpt: Path, out: Path, existing: str = "error", mode: str = "error", **execute: Any) -> Any:
    env = _env(ckpt, existing)
    env.from_source(ListSource(WORDS, splits=2)).key_by(lambda w: w).count().sink_to(FileSink(out, mode=mode))
    return env.execute("fresh", **execute)


def _committed(out: Path) -> collections.Counter[tuple[Any, ...]]:
    return collections.Counter(tuple(r) for r in read_committed(str(out)))


def test_a_fresh_start_over_complete_checkpoints_is_refused_naming_the_directory_and_the_latest(tmp_path: Path) -> None:
    ckpt, out = tmp_path / "ckpt", tmp_path / "out"
    _run(ckpt, out)
    latest = CheckpointStorage(str(ckpt), create=False).complete_checkpoints()[-1]
    with pytest.raises(CheckpointError) as refused:
        _run(ckpt, out, mode="overwrite")
    message = str(refused.value)
    assert str(ckpt) in message and f"latest: {latest}" in message and f"chk-{latest:08d}" in message
    for hint in ('from_checkpoint="latest"', "--from-checkpoint latest", 'existing="overwrite"'):
        assert hint in message
    assert len(message.splitlines()) == 1
    # refused before anything changed: the sink's overwrite did not run, the checkpoints are there
    assert _committed(out) == UPDATES
    assert CheckpointStorage(str(ckpt), create=False).complete_checkpoints()[-1] == latest


def test_resuming_is_not_refused(tmp_path: Path) -> None:
    ckpt, out = tmp_path / "ckpt", tmp_path / "out"
    _run(ckpt, out)
    result = _run(ckpt, out, from_checkpoint="latest")
    assert result.restored_from[0] is not None
    assert _committed(out) == UPDATES  # the final checkpoint was resumed: nothing more to write


def test_existing_overwrite_deletes_the_checkpoints_and_nothing_else(tmp_path: Path) -> None:
    ckpt, out = tmp_path / "ckpt", tmp_path / "out"
    _run(ckpt, out)
    (ckpt / "notes.txt").write_text("mine")
    (ckpt / "chk-backup").mkdir()  # not a checkpoint directory's name
    result = _run(ckpt, out, existing="overwrite", mode="overwrite")
    assert result.restored_from == (None,)
    storage = CheckpointStorage(str(ckpt), create=False)
    assert storage.checkpoint_ids() == [c.checkpoint_id for c in result.checkpoints]  # only this run's
    assert result.checkpoints[0].checkpoint_id == 1  # ids start again
    assert (ckpt / "notes.txt").read_text() == "mine" and (ckpt / "chk-backup").is_dir()
    assert _committed(out) == UPDATES


def test_incomplete_checkpoints_alone_do_not_stop_a_start_and_are_deleted(tmp_path: Path) -> None:
    """A run that failed before its first checkpoint completed committed nothing (sinks commit
    only completed checkpoints), so starting again is safe."""
    ckpt, out = tmp_path / "ckpt", tmp_path / "out"
    storage = CheckpointStorage(str(ckpt))
    storage.write_file(3, "op-0.bin", b"half a checkpoint")  # chk-00000003 without a manifest
    assert storage.checkpoint_ids() == [3] and storage.complete_checkpoints() == []
    result = _run(ckpt, out)
    assert result.restored_from == (None,)
    assert 3 not in CheckpointStorage(str(ckpt), create=False).checkpoint_ids()
    assert _committed(out) == UPDATES


def test_a_job_without_a_checkpoint_directory_is_not_checked_for_one(tmp_path: Path) -> None:
    env = StreamEnvironment(parallelism=1, executor="inprocess")
    env.from_source(ListSource(WORDS)).sink_to(FileSink(tmp_path / "out"))
    env.execute("no-ckpt")
    assert len(read_committed(str(tmp_path / "out"))) == len(WORDS)


@pytest.mark.parametrize("existing", ["fail", "ignore", "", None])
def test_existing_must_be_error_or_overwrite(existing: Any) -> None:
    with pytest.raises((TypeError, ValueError), match="CheckpointConfig.existing must be 'error' or 'overwrite'"):
        CheckpointConfig(existing=existing)


def test_a_missing_input_fails_before_the_first_attempt(tmp_path: Path) -> None:
    env = StreamEnvironment(parallelism=1, executor="inprocess", restart=RestartStrategy(max_restarts=3))
    env.from_source(TextFileSource(tmp_path / "nope.txt")).sink_to(FileSink(tmp_path / "out"))
    with pytest.raises(EpochalError) as refused:
        env.execute("missing")
    assert not isinstance(refused.value, JobFailedError)  # no attempt ran, none was retried
    assert str(refused.value) == f"TextFileSource: no such file or directory: {tmp_path / 'nope.txt'}"
    assert not os.path.exists(tmp_path / "out")  # sources are checked first: nothing was created


class _CountingSource(Source):
    """ListSource's records; counts its checks and fails them on demand."""

    def __init__(self, fail: BaseException | None = None) -> None:
        self.inner = ListSource(WORDS)
        self.fail = fail
        self.checks = 0

    def splits(self) -> Any:
        return self.inner.splits()

    def open_split(self, split: Any, position: Any) -> Any:
        return self.inner.open_split(split, position)

    def check(self) -> None:
        self.checks += 1
        if self.fail is not None:
            raise self.fail


class _Writer(SinkWriter):
    def write(self, batch: Any) -> None:
        pass


class _CheckedSink(Sink):
    def __init__(self) -> None:
        self.calls: list[bool] = []

    def create_writer(self, subtask: int, parallelism: int) -> SinkWriter:
        return _Writer()

    def check(self, resuming: bool) -> None:
        self.calls.append(resuming)


def test_hooks_run_once_per_job_with_resuming_as_it_is(tmp_path: Path) -> None:
    source, sink = _CountingSource(), _CheckedSink()
    env = _env(tmp_path / "ckpt")
    env.from_source(source).map(lambda w: w).sink_to(sink)
    env.execute("hooks")
    assert source.checks == 1 and sink.calls == [False]  # in-process: the very objects
    env.execute("hooks", from_checkpoint="latest")
    assert source.checks == 2 and sink.calls == [False, True]


def test_a_check_that_raises_something_else_is_named_after_the_operator(tmp_path: Path) -> None:
    env = StreamEnvironment(parallelism=1, executor="inprocess")
    env.from_source(_CountingSource(fail=PermissionError("no access")), name="events").sink_to(_CheckedSink())
    with pytest.raises(EpochalError, match=r"source 'events' cannot start: PermissionError: no access"):
        env.execute("named")


def test_sources_and_sinks_without_the_hook_still_run(tmp_path: Path) -> None:
    class Bare:  # duck-typed, no `check`: nothing to call
        def __init__(self) -> None:
            self.inner = ListSource(WORDS)

        def splits(self) -> Any:
            return self.inner.splits()

        def open_split(self, split: Any, position: Any) -> Any:
            return self.inner.open_split(split, position)

    env = StreamEnvironment(parallelism=1, executor="inprocess")
    env.from_source(Bare()).sink_to(FileSink(tmp_path / "out"))  # type: ignore[arg-type]
    env.execute("bare")
    assert len(read_committed(str(tmp_path / "out"))) == len(WORDS)
