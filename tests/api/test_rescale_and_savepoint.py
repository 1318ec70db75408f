"""A running job rescaled and savepointed through its handle: exactly once, and a real savepoint."""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from epochal import CheckpointConfig, EpochalError, JobCancelledError, JobState, Source, SplitReader, StreamEnvironment
from epochal.cluster.launcher import headroom
from epochal.testing import CollectSink

N = 6000


class _Split:
    def __init__(self, i: int) -> None:
        self.split_id = f"seq-{i}"
        self.index = i


class _SlowReader(SplitReader):
    """Numbers i, i + splits, ... below N, ten a read, a millisecond apart."""

    def __init__(self, split: _Split, splits: int, position: int | None) -> None:
        self.next = split.index if position is None else position
        self.step = splits

    def read(self, max_records: int) -> list[int] | None:
        if self.next >= N:
            return None
        time.sleep(0.001)
        out = list(range(self.next, min(N, self.next + 10 * self.step), self.step))
        self.next = out[-1] + self.step
        return out

    def position(self) -> int:
        return self.next


class SlowSequence(Source):
    def __init__(self, splits: int = 2) -> None:
        self.n = splits

    def splits(self) -> list[Any]:
        return [_Split(i) for i in range(self.n)]

    def open_split(self, split: Any, position: Any | None) -> SplitReader:
        return _SlowReader(split, self.n, position)


def _env(tmp_path: Path, parallelism: int, sink: CollectSink, **kw: Any) -> StreamEnvironment:
    env = StreamEnvironment(parallelism=parallelism, executor="inprocess",
                            checkpoint=CheckpointConfig(interval=0.2, directory=str(tmp_path / "c")), **kw)
    env.from_source(SlowSequence()).key_by(lambda x: x % 7).count().sink_to(sink)
    return env


def _expected() -> Counter[Any]:
    counts: Counter[int] = Counter()
    out: Counter[Any] = Counter()
    for x in range(N):
        counts[x % 7] += 1
        out[(x % 7, counts[x % 7])] += 1
    return out


def _wait_running(handle: Any, parallelism: int) -> None:
    deadline = time.monotonic() + 30
    while not (handle.status().state is JobState.RUNNING and handle.status().parallelism == parallelism):
        assert time.monotonic() < deadline, handle.status()
        time.sleep(0.005)


def test_rescale_up_and_down_while_running_commits_every_update_once(tmp_path: Path) -> None:
    sink = CollectSink()
    handle = _env(tmp_path, 1, sink).execute_async("rescaled")
    _wait_running(handle, 1)
    first = handle.rescale(3, timeout=30)  # beyond the slots: a restart, with headroom (5 workers)
    _wait_running(handle, 3)
    second = handle.rescale(5, timeout=30)  # into the headroom: live
    _wait_running(handle, 5)
    third = handle.rescale(2, timeout=30)  # off it: live
    assert first < second < third
    result = handle.result(timeout=60)
    assert Counter(sink.committed()) == _expected()  # nothing lost, nothing twice
    assert handle.status().parallelism == 2 and handle.status().state is JobState.FINISHED
    assert result.restarts == 0 and result.restored_from == (first,), "the later rescales restarted the job"
    # the counts are the whole job's, not those since the rescale's checkpoint (issue 40)
    assert result.counts_whole and result.since_checkpoint == first
    assert (result.records_in, result.records_out) == (N, N), result.summary()


@pytest.mark.parametrize(
    ("current", "parallelism", "max_workers", "slots", "workers"),
    [(1, 3, None, 100, 5), (2, 4, None, 5, 5), (2, 4, None, None, 4), (4, 2, 6, 8, 6), (2, 3, 8, 16, 8)],
)
def test_a_rescale_beyond_the_slots_launches_room_for_one_more_step(
    current: int, parallelism: int, max_workers: int | None, slots: int | None, workers: int
) -> None:
    assert headroom(current, parallelism, max_workers, slots) == workers


@pytest.mark.parametrize("max_workers", [None, 3])
def test_a_rescale_to_the_parallelism_it_runs_at_changes_nothing(tmp_path: Path, max_workers: int | None) -> None:
    """Before any checkpoint it answers None (it raised an AssertionError with standby subtasks,
    and without them restarted the job from a new checkpoint); after, the newest checkpoint."""
    sink = CollectSink()
    env = StreamEnvironment(parallelism=2, executor="inprocess", max_workers=max_workers,
                            checkpoint=CheckpointConfig(interval=3_600, directory=str(tmp_path / "c")))
    env.from_source(SlowSequence()).key_by(lambda x: x % 7).count().sink_to(sink)
    handle = env.execute_async("as-it-is")
    _wait_running(handle, 2)
    assert handle.rescale(2, timeout=30) is None
    status = handle.status()
    assert status.restarts == 0 and status.state is JobState.RUNNING and status.last_checkpoint is None
    handle.cancel()  # with standby subtasks a bounded job ends at a checkpoint after its data: an hour
    with pytest.raises(JobCancelledError):
        handle.result(timeout=60)

    sink = CollectSink()
    handle = _env(tmp_path / "later", 2, sink, max_workers=max_workers).execute_async("as-it-is-later")
    deadline = time.monotonic() + 30
    while (handle.status().last_checkpoint or 0) < 1:
        assert time.monotonic() < deadline, handle.status()
        time.sleep(0.01)
    newest = handle.rescale(2, timeout=30)
    assert newest is not None and newest >= 1
    assert handle.result(timeout=60).restarts == 0
    assert Counter(sink.committed()) == _expected()


def test_a_bad_parallelism_is_refused_and_the_job_runs_on(tmp_path: Path) -> None:
    sink = CollectSink()
    handle = _env(tmp_path, 1, sink).execute_async("refused")
    _wait_running(handle, 1)
    with pytest.raises(ValueError, match="max_parallelism"):
        handle.rescale(0, timeout=30)
    handle.result(timeout=60)
    assert Counter(sink.committed()) == _expected()


def test_rescale_needs_a_checkpoint_directory() -> None:
    env = StreamEnvironment(parallelism=1, executor="inprocess")
    env.from_source(SlowSequence()).sink_to(CollectSink())
    handle = env.execute_async("no-directory")
    _wait_running(handle, 1)
    with pytest.raises(EpochalError, match="needs CheckpointConfig"):
        handle.rescale(2, timeout=30)
    handle.result(timeout=60)


def test_a_savepoint_of_a_running_job_is_a_new_checkpoint_a_job_can_start_from(tmp_path: Path) -> None:
    sink = CollectSink()
    handle = _env(tmp_path, 2, sink).execute_async("saved")
    _wait_running(handle, 2)
    time.sleep(0.3)
    before = handle.status().last_checkpoint
    location = handle.savepoint(str(tmp_path / "sp"), timeout=30)
    assert (tmp_path / "sp" / "MANIFEST.json").exists() and "sp" in location
    assert handle.status().last_checkpoint is not None and handle.status().last_checkpoint != before
    handle.result(timeout=60)
    # a second job from the savepoint: its output joined with what the first committed up to the
    # savepoint is the failure-free output; here it is enough that it starts and ends cleanly
    resumed = CollectSink()
    _env(tmp_path / "second", 3, resumed).execute("resumed", from_checkpoint=str(tmp_path / "sp"))
    assert resumed.committed() and set(resumed.committed()) <= set(_expected())


def test_a_savepoint_after_the_end_is_refused(tmp_path: Path) -> None:
    sink = CollectSink()
    handle = _env(tmp_path, 1, sink).execute_async("ended")
    handle.result(timeout=60)
    with pytest.raises(EpochalError, match="has ended"):
        handle.savepoint(str(tmp_path / "sp"), timeout=5)
