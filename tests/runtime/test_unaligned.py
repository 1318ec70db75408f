"""Unaligned checkpoints and the at-least-once mode (`CheckpointConfig(mode=...)`, `runtime.task.in_flight`).

Unaligned: a barrier overtakes the data queued ahead of it, the task snapshots at the first
barrier of a checkpoint, and the data in flight is stored with the state and replayed on
restore: exactly once, like aligned checkpoints. At-least-once: barriers are counted and block
nothing, so a restore may process records twice but never loses one.
"""

from __future__ import annotations

import collections
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from epochal import CheckpointConfig, StreamEnvironment
from epochal.cluster.inprocess import InProcessExecutor
from epochal.errors import CheckpointError
from epochal.plan.job_graph import JobGraph, TaskId
from epochal.runtime.channel_state import IN_FLIGHT
from epochal.runtime.task.task import Task
from epochal.runtime.wire.channel import LocalChannel
from epochal.runtime.wire.elements import Alignment, Barrier
from epochal.state.storage import CheckpointStorage
from epochal.testing import CollectSink, Crash, ListSource

KEYS = 5
N = 1_200


def _env(
    tmp_path: Path, items: list[Any], mode: str, seed: int, parallelism: int = 2
) -> tuple[StreamEnvironment, CollectSink]:
    env = StreamEnvironment(
        parallelism=parallelism, executor="inprocess", seed=seed, batch_size=8, channel_capacity=1,
        checkpoint=CheckpointConfig(interval=0.002, directory=str(tmp_path / "ckpt"), mode=mode, retain=10_000),  # type: ignore[arg-type]
    )
    sink = CollectSink()
    (
        env.from_source(ListSource(items, splits=2, batch_size=8))
        .map(lambda x: x)
        .key_by(lambda x: x % KEYS)
        .count()
        .sink_to(sink)
    )
    return env, sink


def _expected(values: list[int]) -> list[tuple[int, int]]:
    totals = collections.Counter(v % KEYS for v in values)
    return sorted((k, n) for k, c in totals.items() for n in range(1, c + 1))


def _in_flight_checkpoints(tmp_path: Path) -> set[int]:
    storage = CheckpointStorage(str(tmp_path / "ckpt"), create=False)
    found = set()
    for cid in storage.complete_checkpoints():
        manifest = storage.resolve(cid)
        if any(op.uid.endswith(IN_FLIGHT) for op in manifest.operators):
            found.add(cid)
    return found


def test_channels_count_unaligned_barriers_and_hand_out_the_data_they_overtook() -> None:
    channel = LocalChannel(capacity=4)
    channel.send([1, 2])
    channel.send(Barrier(1, 0.0))  # aligned: not a priority element
    channel.send([3])
    channel.send(Barrier(2, 0.0, alignment=Alignment.UNALIGNED))
    channel.send([4])
    assert channel.priority == 1
    ahead, barrier = channel.take_priority_barrier()
    assert barrier.checkpoint_id == 2 and ahead == [[1, 2], Barrier(1, 0.0), [3]]
    assert channel.priority == 0
    assert [channel.poll() for _ in range(len(channel))] == [[1, 2], Barrier(1, 0.0), [3], [4]]


def test_an_unaligned_barrier_is_taken_even_while_the_task_output_is_full(
    open_tasks: Callable[[JobGraph], dict[TaskId, Task]]
) -> None:
    env = StreamEnvironment(parallelism=1, executor="inprocess", checkpoint=CheckpointConfig(mode="unaligned"))
    counts = env.from_source(ListSource(range(10))).key_by(lambda x: x % KEYS).count()
    counts.key_by(lambda kv: kv[0]).map(lambda kv: kv).sink_to(CollectSink())
    tasks = open_tasks(env.job_graph("overtake"))
    counter = next(t for t in tasks.values() if t.gate.channels and t.output.channels)
    channel = counter.gate.channels[0]
    assert isinstance(channel, LocalChannel)
    for out in counter.output.channels:  # downstream is slow: the output is full
        while out.has_capacity():
            out.send([(0, 0)])
    channel.send([1, 2, 3])
    channel.send(Barrier(1, 0.0, alignment=Alignment.UNALIGNED))
    assert counter.is_runnable()
    counter.step()
    assert channel.priority == 0 and counter.checkpoints.last_checkpoint == 1  # state fixed before [1, 2, 3] ran
    assert channel.peek() == [1, 2, 3]  # the overtaken data is still to be processed
    assert all(Barrier(1, 0.0, alignment=Alignment.UNALIGNED) in list(out._queue) for out in counter.output.channels)


@pytest.mark.parametrize("seed", range(8))
def test_unaligned_checkpoints_restore_the_data_in_flight_exactly_once(tmp_path: Path, seed: int) -> None:
    values = list(range(N))
    items: list[Any] = [*values[: N // 2 + seed * 37], Crash(), *values[N // 2 + seed * 37 :]]
    env, sink = _env(tmp_path, items, "unaligned", seed)
    result = InProcessExecutor(seed=seed, virtual_time=True).execute(env.job_graph("unaligned"))
    assert result.restarts == 1
    assert sorted(sink.committed()) == _expected(values)
    assert _in_flight_checkpoints(tmp_path), "no checkpoint held data in flight: nothing was tested"


def test_a_restore_replays_in_flight_data(tmp_path: Path) -> None:
    """Across seeds, some crash restores a checkpoint that holds in-flight data (else the replay
    path went untested), and the output is still exact."""
    replayed = 0
    for seed in range(12):
        directory = tmp_path / str(seed)
        values = list(range(N))
        items: list[Any] = [*values[:700], Crash(), *values[700:]]
        env, sink = _env(directory, items, "unaligned", seed)
        result = InProcessExecutor(seed=seed, virtual_time=True).execute(env.job_graph("replay"))
        assert sorted(sink.committed()) == _expected(values), f"seed {seed}"
        restored = result.restored_from[-1]
        replayed += restored is not None and restored in _in_flight_checkpoints(directory)
    assert replayed >= 1


def test_an_unaligned_checkpoint_does_not_restore_at_another_parallelism(tmp_path: Path) -> None:
    values = list(range(N))
    env, _ = _env(tmp_path, values, "unaligned", seed=1)
    InProcessExecutor(seed=1, virtual_time=True).execute(env.job_graph("unaligned"))
    with_data = sorted(_in_flight_checkpoints(tmp_path))
    assert with_data
    env3, _ = _env(tmp_path, values, "unaligned", seed=1, parallelism=3)
    with pytest.raises(CheckpointError, match="unaligned.*parallelism 2.*parallelism 3"):
        InProcessExecutor(seed=1, virtual_time=True).execute(
            env3.job_graph("unaligned"), from_checkpoint=with_data[0]
        )


def test_a_savepoint_is_aligned_in_unaligned_mode(tmp_path: Path) -> None:
    """What a rescale or a savepoint takes restores at any parallelism: it holds no in-flight data."""
    values = list(range(N))
    env, sink = _env(tmp_path, values, "unaligned", seed=2)
    handle = env.execute_async("savepoint")
    handle.savepoint(str(tmp_path / "sp"))
    handle.result()
    assert sorted(sink.committed()) == _expected(values)
    from epochal.state.savepoints import load_savepoint

    manifest = load_savepoint(str(tmp_path / "sp"))
    assert not any(op.uid.endswith(IN_FLIGHT) for op in manifest.operators)


@pytest.mark.parametrize("seed", range(4))
def test_at_least_once_loses_nothing_across_a_crash(tmp_path: Path, seed: int) -> None:
    values = list(range(N))
    items: list[Any] = [*values[:600], Crash(), *values[600:]]
    env, sink = _env(tmp_path, items, "at_least_once", seed)
    result = InProcessExecutor(seed=seed, virtual_time=True).execute(env.job_graph("alo"))
    assert result.restarts == 1 and len(result.checkpoints) > 2
    committed = collections.Counter(sink.committed())
    assert not collections.Counter(_expected(values)) - committed  # nothing lost (duplicates allowed)


def test_at_least_once_barriers_block_no_input(
    tmp_path: Path, open_tasks: Callable[[JobGraph], dict[TaskId, Task]]
) -> None:
    env, _ = _env(tmp_path, list(range(10)), "at_least_once", seed=0)
    tasks = open_tasks(env.job_graph("alo"))
    counter = next(t for t in tasks.values() if len(t.gate.channels) == 2)
    first = counter.gate.channels[0]
    assert isinstance(first, LocalChannel)
    first.send(Barrier(1, 0.0, alignment=Alignment.NONE))
    first.send([1, 2])
    counter.step()  # the barrier
    assert not counter.gate.aligner.is_blocked(0)
    counter.step()
    assert counter.chain.records_in[0] == 2  # read behind the barrier before input 1 delivered it
