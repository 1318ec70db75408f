"""A watched directory (`TextFileSource(watch=...)`): files that arrive while the job runs are
read exactly once, across a crash, a rescale, and a new job started from the checkpoint.

The jobs run in the background on the wall clock; files arrive between steps of the test. Each
job keeps a running count per word, so every line read twice, or not at all, shows up as a
wrong `(word, n)` update in the committed output."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from epochal import CheckpointConfig, JobCancelledError, JobHandle, RestartStrategy, StreamEnvironment
from epochal.connectors import FileSink, TextFileSource
from epochal.errors import EpochalError, InjectedFailure
from spark_jobs import add_file, committed, expected, wait_until

_crashed: set[str] = set()  # the lines that already failed a job once (in-process runs)


def crash_once_at(marker: str) -> Callable[[str], list[str]]:
    def split(line: str) -> list[str]:
        if marker in line and marker not in _crashed:
            _crashed.add(marker)
            raise InjectedFailure(f"crash at {marker!r}")
        return line.split()

    return split


def start(
    tmp_path: Path, split: Callable[[str], list[str]] = str.split, parallelism: int = 2, **kwargs: object
) -> JobHandle:
    env = StreamEnvironment(
        parallelism=parallelism,
        executor="inprocess",
        checkpoint=CheckpointConfig(interval=0.1, directory=str(tmp_path / "ckpt")),
        restart=RestartStrategy(max_restarts=3, delay=0.0),
    )
    lines = env.from_source(TextFileSource(tmp_path / "inbox", watch=0.05, split_size=2_000))
    lines.flat_map(split).key_by(lambda w: w).count().sink_to(FileSink(str(tmp_path / "out")))
    return env.execute_async("watched", **kwargs)  # type: ignore[arg-type]


def finish(handle: JobHandle, tmp_path: Path) -> None:
    """Wait until everything in the inbox is committed, then cancel the (endless) job."""
    want = len(expected(tmp_path / "inbox"))
    wait_until(lambda: len(committed(tmp_path / "out")) >= want or handle.done(), "the inbox is committed")
    handle.cancel()
    with pytest.raises(JobCancelledError):
        handle.result(timeout=60)


@pytest.fixture
def inbox(tmp_path: Path) -> Path:
    (tmp_path / "inbox").mkdir()
    add_file(tmp_path / "inbox", "f00.txt", 300, seed=0)
    (tmp_path / "inbox" / "_ignored.txt").write_text("never read\n")
    return tmp_path / "inbox"


def test_files_that_arrive_during_a_run_with_a_crash_are_read_exactly_once(tmp_path: Path, inbox: Path) -> None:
    handle = start(tmp_path, split=crash_once_at("crash-in-f03"))
    for i in range(1, 6):
        seen = handle.status().last_checkpoint or 0
        wait_until(lambda seen=seen: (handle.status().last_checkpoint or 0) > seen, "the next checkpoint completed")
        add_file(inbox, f"f{i:02d}.txt", 300, seed=i, marker="crash-in-f03" if i == 3 else "")
    finish(handle, tmp_path)
    assert handle.status().restarts == 1
    assert committed(tmp_path / "out") == expected(inbox)


def test_a_job_started_from_its_checkpoint_reads_only_the_files_it_had_not_read(tmp_path: Path, inbox: Path) -> None:
    add_file(inbox, "f01.txt", 300, seed=1)
    handle = start(tmp_path)
    finish(handle, tmp_path)
    first = committed(tmp_path / "out")
    assert first == expected(inbox)
    # the next job resumes from the last checkpoint: f00 and f01 are known, f02 and f03 are new
    add_file(inbox, "f02.txt", 300, seed=2)
    add_file(inbox, "f03.txt", 300, seed=3)
    handle = start(tmp_path, from_checkpoint="latest")
    finish(handle, tmp_path)
    assert committed(tmp_path / "out") == expected(inbox)


def test_a_rescaled_watched_job_reads_each_file_once(tmp_path: Path, inbox: Path) -> None:
    handle = start(tmp_path, parallelism=1)
    add_file(inbox, "f01.txt", 300, seed=1)
    wait_until(lambda: handle.status().last_checkpoint is not None, "a checkpoint completed")
    handle.rescale(3, timeout=60)
    for i in range(2, 5):
        add_file(inbox, f"f{i:02d}.txt", 300, seed=i)
    finish(handle, tmp_path)
    assert handle.status().parallelism == 3
    assert committed(tmp_path / "out") == expected(inbox)


def test_watch_needs_a_directory_and_a_positive_interval(tmp_path: Path) -> None:
    (tmp_path / "one.txt").write_text("a\n")
    env = StreamEnvironment(executor="inprocess")
    env.from_source(TextFileSource(tmp_path / "one.txt", watch=True)).sink_to(FileSink(str(tmp_path / "out")))
    with pytest.raises(EpochalError, match="watch needs a directory"):
        env.execute("one-file")
    with pytest.raises(ValueError, match="watch must be a positive number of seconds"):
        TextFileSource(tmp_path, watch=0)
    assert TextFileSource(tmp_path, watch=True).discovery_interval() == 1.0
    assert TextFileSource(tmp_path).discovery_interval() is None
