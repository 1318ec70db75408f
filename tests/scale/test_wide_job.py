"""A job wider than one machine usually runs: 256 subtasks, 4,096 key groups, in-process.

What issue 42 asks a test to show: at this parallelism a job checkpoints (one merged file per
checkpoint), is rescaled through its handle (a restart from a checkpoint, key groups in new
ranges), fails and restores, and its sink holds every update exactly once.
"""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path
from typing import Any

from epochal import CheckpointConfig, JobState, RestartStrategy, Source, SplitReader, StateConfig, StreamEnvironment
from epochal.state.storage import CheckpointStorage
from epochal.state.verify import verify_checkpoint
from epochal.testing import CollectSink

N = 12_000
SPLITS = 16
KEYS = 5_000  # more keys than key groups: every group holds some
PARALLELISM, RESCALED, GROUPS = 256, 160, 4096
PACE = 0.03  # seconds between two reads of a split: 600 reads over 16 splits, about a second of input


class _Split:
    def __init__(self, i: int) -> None:
        self.split_id = f"paced-{i}"
        self.index = i


class _PacedReader(SplitReader):
    """Numbers i, i + SPLITS, ... below N, twenty a read, a read every `PACE` seconds; the
    second half only once the file `release` exists. It waits without blocking (`retry_after`):
    the host's other tasks run meanwhile."""

    def __init__(self, split: _Split, position: int | None, release: Path) -> None:
        self.next = split.index if position is None else position
        self.due = time.monotonic()
        self.release = release

    def read(self, max_records: int) -> list[int] | None:
        if self.next >= N:
            return None
        now = time.monotonic()
        if now < self.due or (self.next >= N // 2 and not self.release.exists()):
            return []
        self.due = now + PACE
        out = list(range(self.next, min(N, self.next + 20 * SPLITS), SPLITS))
        self.next = out[-1] + SPLITS
        return out

    def retry_after(self) -> float:
        return max(0.0, self.due - time.monotonic())

    def position(self) -> int:
        return self.next


class _Paced(Source):
    def __init__(self, release: Path) -> None:
        self.release = release

    def splits(self) -> list[Any]:
        return [_Split(i) for i in range(SPLITS)]

    def open_split(self, split: Any, position: Any | None) -> SplitReader:
        return _PacedReader(split, position, self.release)


class _CrashOnce:
    """Fails once, on the first record after the file `armed` exists."""

    def __init__(self, armed: Path, crashed: Path) -> None:
        self.armed, self.crashed = armed, crashed

    def __call__(self, x: int) -> int:
        if self.armed.exists() and not self.crashed.exists():
            self.crashed.touch()
            raise RuntimeError(f"failing once at {x}")
        return x


def _key(x: int) -> int:
    return x % KEYS


def test_parallelism_256_with_4096_key_groups_checkpoints_rescales_and_restores_exactly_once(tmp_path: Path) -> None:
    sink = CollectSink()
    directory = tmp_path / "ckpt"
    env = StreamEnvironment(
        parallelism=PARALLELISM, executor="inprocess", state=StateConfig(max_parallelism=GROUPS),
        checkpoint=CheckpointConfig(interval=0.2, directory=str(directory), retain=1_000),
        restart=RestartStrategy(max_restarts=1),
    )
    release, armed, crashed = tmp_path / "release", tmp_path / "armed", tmp_path / "crashed"
    (env.from_source(_Paced(release)).map(_CrashOnce(armed, crashed))
        .key_by(_key).count().uid("count").sink_to(sink))
    handle = env.execute_async("wide")
    deadline = time.monotonic() + 240

    def wait(until: Any) -> None:
        while not until(handle.status()):
            assert time.monotonic() < deadline and not handle.done(), handle.status()
            time.sleep(0.01)

    wait(lambda s: (s.last_checkpoint or 0) >= 1)  # a checkpoint at 256 subtasks
    rescaled_at = handle.rescale(RESCALED, timeout=120)  # the first half of the input is in or on its way
    assert rescaled_at is not None
    wait(lambda s: s.state is JobState.RUNNING and s.parallelism == RESCALED)
    wait(lambda s: (s.last_checkpoint or 0) > rescaled_at)  # a checkpoint at 160 subtasks
    armed.touch()  # the next record fails the job once: it restores the checkpoint at 160
    release.touch()  # and the second half of the input comes
    result = handle.result(timeout=300)

    counts: Counter[int] = Counter()
    expected: Counter[Any] = Counter()
    for x in range(N):
        counts[_key(x)] += 1
        expected[(_key(x), counts[_key(x)])] += 1
    assert Counter(sink.committed()) == expected  # nothing lost, nothing twice
    assert result.restarts == 1 and crashed.exists()
    assert result.restored_from[0] == rescaled_at and result.restored_from[1] is not None
    assert result.restored_from[1] > rescaled_at  # the crash restored a checkpoint taken at 160 subtasks

    storage = CheckpointStorage(str(directory), create=False)
    widths = set()
    for checkpoint_id in storage.complete_checkpoints():
        manifest = storage.load_manifest(checkpoint_id)
        count = manifest.operator("count")
        assert count is not None and count.max_parallelism == GROUPS
        widths.add(count.parallelism)
        own = f"chk-{checkpoint_id:08d}/"
        assert len([f for f in manifest.stored_files() if f.path.startswith(own)]) == 1  # one merged file
        storage.check_files(manifest)
    assert widths == {PARALLELISM, RESCALED}
    verify_checkpoint(storage, storage.load_manifest(storage.complete_checkpoints()[-1]))
