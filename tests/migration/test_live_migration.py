"""Key groups moved between running subtasks: every update committed once, nothing restarted."""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from tests.api.test_rescale_and_savepoint import SlowSequence, _expected

from epochal import CheckpointConfig, EpochalError, JobState, StreamEnvironment
from epochal.state.keygroups import RoutingTable, key_group_of
from epochal.state.storage import CheckpointStorage
from epochal.testing import CollectSink

KEYS = 7


def _env(tmp_path: Path, sink: CollectSink, parallelism: int = 2, **state: Any) -> StreamEnvironment:
    env = StreamEnvironment(parallelism=parallelism, executor="inprocess",
                            checkpoint=CheckpointConfig(interval=0.2, directory=str(tmp_path / "c")))
    env.from_source(SlowSequence()).key_by(lambda x: x % KEYS).count().uid("count").sink_to(sink)
    return env


def _wait_running(handle: Any) -> None:
    deadline = time.monotonic() + 30
    while handle.status().state is not JobState.RUNNING:
        assert time.monotonic() < deadline, handle.status()
        time.sleep(0.005)


def _groups_of_keys() -> list[int]:
    return sorted({key_group_of(k) for k in range(KEYS)})


def test_moving_every_used_key_group_back_and_forth_commits_every_update_once(tmp_path: Path) -> None:
    sink = CollectSink()
    handle = _env(tmp_path, sink).execute_async("moved")
    _wait_running(handle)
    groups = _groups_of_keys()
    contiguous = RoutingTable.contiguous(2, 128)
    there = {g: 1 - contiguous.owners[g] for g in groups}  # every used group to the other subtask
    first = handle.move_key_groups(there, timeout=30)
    back = {g: contiguous.owners[g] for g in groups}
    second = handle.move_key_groups(back, timeout=30)
    assert second > first
    result = handle.result(timeout=60)
    assert Counter(sink.committed()) == _expected()  # nothing lost, nothing twice
    assert result.restarts == 0 and result.restored_from == (None,)
    manifest = CheckpointStorage(str(tmp_path / "c")).resolve("latest")
    assert manifest.routing == RoutingTable(contiguous.owners, 2, version=2)  # moved, and moved back


def test_a_move_that_moves_nothing_is_refused_and_the_job_runs_on(tmp_path: Path) -> None:
    sink = CollectSink()
    handle = _env(tmp_path, sink).execute_async("refused")
    _wait_running(handle)
    with pytest.raises(ValueError, match="moves nothing|leave every key group"):
        handle.move_key_groups({0: 0}, timeout=30)
    with pytest.raises(ValueError, match="out of range"):
        handle.move_key_groups({0: 5}, timeout=30)
    handle.result(timeout=60)
    assert Counter(sink.committed()) == _expected()


def test_moving_needs_a_checkpoint_directory() -> None:
    env = StreamEnvironment(parallelism=2, executor="inprocess")
    env.from_source(SlowSequence()).key_by(lambda x: x % KEYS).count().sink_to(CollectSink())
    handle = env.execute_async("no-directory")
    _wait_running(handle)
    with pytest.raises(EpochalError, match="needs CheckpointConfig"):
        handle.move_key_groups({0: 1}, timeout=30)
    handle.result(timeout=60)


def test_in_every_checkpoint_each_key_group_has_exactly_one_owner(tmp_path: Path) -> None:
    sink = CollectSink()
    env = StreamEnvironment(parallelism=2, executor="inprocess",
                            checkpoint=CheckpointConfig(interval=0.05, directory=str(tmp_path / "c"), retain=1_000))
    env.from_source(SlowSequence()).key_by(lambda x: x % KEYS).count().uid("count").sink_to(sink)
    handle = env.execute_async("owners")
    _wait_running(handle)
    contiguous = RoutingTable.contiguous(2, 128)
    groups = _groups_of_keys()
    # one way: subtask 0 only loses, subtask 1 only gains
    handle.move_key_groups({g: 1 for g in groups if contiguous.owners[g] == 0}, timeout=30)
    time.sleep(0.3)  # checkpoints after the move: the old owner's must not hold the groups any more
    handle.result(timeout=60)
    assert Counter(sink.committed()) == _expected()
    storage = CheckpointStorage(str(tmp_path / "c"))
    ids = storage.complete_checkpoints()
    assert len(ids) > 3
    for cid in ids:
        op = storage.resolve(cid).operator("count")
        assert op is not None
        held = sorted(g for st in op.subtasks for g in st.holds())
        assert held == list(range(128)), f"checkpoint {cid}"
