"""Vertical elasticity (`epochal.runtime.operators.function_pool`): a stateless operator's
function in a pool of processes of its own, resized while the job runs.

Each pooled function tags its record with the process that computed it, so a test can see the
pool grow; the committed values must be every record once whatever the pool's size, and in
order where the job keeps order.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pytest
from test_patches import EpochSink, _wait_for

from epochal import CheckpointConfig, EpochalError, RestartStrategy, StreamEnvironment
from epochal.runtime.operators.function_pool import FunctionPool
from epochal.testing import CollectSink, ListSource
from pool_functions import (
    FailsOnceAfter,
    SaysWhereLoaded,
    by_pid,
    fails_on_seven,
    odd,
    square,
    tag_new,
    tag_old,
    twice,
)
from spark_jobs import EndlessSource

RECORDS = 4_000


def test_a_pool_computes_what_the_function_computes_in_line_in_order() -> None:
    values = list(range(5_000))
    env = StreamEnvironment(parallelism=1, executor="inprocess")
    sinks = [CollectSink() for _ in range(3)]
    source = env.from_source(ListSource(values, batch_size=500))
    source.map(square, processes=3).sink_to(sinks[0])
    source.filter(odd, processes=2).sink_to(sinks[1])
    source.flat_map(twice, processes=2).sink_to(sinks[2])
    env.execute("pooled")
    assert sinks[0].committed() == [square(x) for x in values]
    assert sinks[1].committed() == [x for x in values if odd(x)]
    assert sinks[2].committed() == [y for x in values for y in twice(x)]


def test_a_pool_skips_what_the_function_fails_on_and_fails_naming_the_record() -> None:
    env = StreamEnvironment(parallelism=1, executor="inprocess")
    sink = CollectSink()
    env.from_source(ListSource(range(100), batch_size=30)).map(fails_on_seven, on_error="skip",
                                                               processes=2).sink_to(sink)
    env.execute("skipping")
    assert sink.committed() == [x for x in range(100) if x % 7]
    env = StreamEnvironment(parallelism=1, executor="inprocess")
    env.from_source(ListSource(range(100))).map(fails_on_seven, name="sevens", processes=2).sink_to(CollectSink())
    with pytest.raises(EpochalError, match=r"sevens.*no sevens: 0"):
        env.execute("failing")


def test_processes_must_be_a_positive_int() -> None:
    env = StreamEnvironment(parallelism=1, executor="inprocess")
    with pytest.raises(ValueError, match="processes must be a positive int"):
        env.from_source(ListSource([1])).map(square, processes=0)


def test_a_pool_grows_without_waiting_and_its_processes_end_with_it() -> None:
    pool = FunctionPool(by_pid, 1, "map")
    assert pool.apply([1, 2], False)[0] == "ok"
    began = time.monotonic()
    pool.resize(3)
    assert time.monotonic() - began < 0.5, "a resize starts processes; it does not wait for them"
    _wait_for(lambda: pool.apply(list(range(30)), False) and pool.ready == 3, timeout=60)
    status, out, _ = pool.apply(list(range(30)), False)
    assert [x for x, _ in out] == list(range(30)) and len({pid for _, pid in out}) == 3
    popens = [p.popen for p in pool.processes]
    pool.resize(1)
    assert len({pid for _, pid in pool.apply(list(range(30)), False)[1]}) == 1
    pool.close()
    assert all(p.poll() is not None for p in popens), "no pool process outlives its pool"


def _pooled_job(tmp_path: Path, sink: EpochSink, fn: Any, restarts: int = 0,
                records: int = RECORDS) -> StreamEnvironment:
    env = StreamEnvironment(parallelism=2, executor="inprocess", restart=RestartStrategy(max_restarts=restarts),
                            checkpoint=CheckpointConfig(interval=0.05, directory=str(tmp_path / "ckpt")))
    env.from_source(EndlessSource(stop_at=records)).rebalance().map(fn, name="work", processes=1).sink_to(sink)
    return env


def _pids_after(sink: EpochSink, checkpoint: int) -> set[int]:
    return {pid for c, (_, pid) in sink.committed if c > checkpoint}


def _cancel(handle: Any) -> None:
    handle.cancel()
    with pytest.raises(EpochalError):
        handle.result(timeout=30)


def test_a_live_resize_spreads_the_function_over_more_processes_and_every_record_commits_once(
        tmp_path: Path) -> None:
    sink = EpochSink()
    handle = _pooled_job(tmp_path, sink, by_pid, records=200_000).execute_async("resized")
    _wait_for(lambda: handle.status().last_checkpoint is not None)
    assert len({pid for _, (_, pid) in sink.committed}) <= 2, "one process per subtask"
    assert handle.resize("work", 3, timeout=30) == 3
    grown_at = handle.status().last_checkpoint or 0
    _wait_for(lambda: len(_pids_after(sink, grown_at)) > 2, timeout=90)  # two subtasks, three processes each
    assert handle.resize("work", 1, timeout=30) == 1
    shrunk_at = (handle.status().last_checkpoint or 0) + 2  # one under way may hold the larger pools' records
    _wait_for(lambda: (handle.status().last_checkpoint or 0) > shrunk_at + 2)
    _cancel(handle)
    assert len(_pids_after(sink, shrunk_at)) <= 2, "one process per subtask again"
    _check_every_record_once(sink)


def test_a_resize_returns_once_every_subtask_runs_the_new_size(tmp_path: Path) -> None:
    """Each pool process leaves a file when it loads the function: when `resize` returns, both
    subtasks' pools run three processes with the function loaded (before, it returned once the
    resize was sent, while the new processes were starting: 0.1-2 s)."""
    loaded = tmp_path / "loaded"
    loaded.mkdir()
    sink = EpochSink()
    handle = _pooled_job(tmp_path, sink, SaysWhereLoaded(str(loaded)), records=200_000).execute_async("confirmed")
    _wait_for(lambda: handle.status().last_checkpoint is not None)
    pool_pids = lambda: {int(name) for name in os.listdir(loaded)} - {os.getpid()}  # noqa: E731
    assert len(pool_pids()) == 2, "one process per subtask"
    assert handle.resize("work", 3, timeout=60) == 3
    assert len(pool_pids()) == 2 * 3, "every new process had loaded the function when resize returned"
    assert handle.resize("work", 1, timeout=60) == 1  # a shrink is confirmed at once
    _cancel(handle)
    _check_every_record_once(sink)


def _check_every_record_once(sink: EpochSink) -> None:
    """No record twice, and none missing up to the last checkpoint both subtasks committed (each
    subtask's sink commits on its own, so a cancel may come between the two)."""
    values = [x for _, (x, _) in sink.committed]
    assert len(values) == len(set(values)), "no record twice"
    both = min(max(c for c, s in sink._seen if s == subtask) for subtask in (0, 1))
    upto = sorted(x for c, (x, _) in sink.committed if c <= both)
    assert upto == list(range(len(upto))), "every record once"


def test_a_resize_of_an_operator_without_a_pool_is_refused(tmp_path: Path) -> None:
    sink = EpochSink()
    env = StreamEnvironment(parallelism=1, executor="inprocess",
                            checkpoint=CheckpointConfig(interval=0.05, directory=str(tmp_path / "ckpt")))
    env.from_source(EndlessSource(stop_at=300)).map(by_pid, name="inline").sink_to(sink)
    handle = env.execute_async("inline")
    _wait_for(lambda: handle.status().last_checkpoint is not None)
    with pytest.raises(EpochalError, match="runs no process pool"):
        handle.resize("inline", 2, timeout=30)
    with pytest.raises(EpochalError, match="no operator with uid 'nope'"):
        handle.resize("nope", 2, timeout=30)
    _cancel(handle)


def test_a_restart_keeps_the_pool_size_and_commits_every_record_once(tmp_path: Path) -> None:
    sink = EpochSink()
    marker = str(tmp_path / "failed")
    handle = _pooled_job(tmp_path, sink, FailsOnceAfter(marker, RECORDS // 2), restarts=2).execute_async("restart")
    _wait_for(lambda: handle.status().last_checkpoint is not None)
    handle.resize("work", 3, timeout=30)
    _wait_for(lambda: len(sink.committed) >= RECORDS)
    _cancel(handle)
    assert os.path.exists(marker) and handle.status().restarts == 1, "the failure must have happened"
    values = sorted(x for _, (x, _) in sink.committed)
    assert values == list(range(RECORDS)), "every record once"
    late = {pid for _, (x, pid) in sink.committed if x >= RECORDS * 3 // 4}
    assert len(late) > 2, "after the restart each subtask runs three processes again"


def test_a_patch_of_a_pooled_map_reaches_its_processes_at_one_checkpoint(tmp_path: Path) -> None:
    sink = EpochSink()
    env = StreamEnvironment(parallelism=2, executor="inprocess",
                            checkpoint=CheckpointConfig(interval=0.05, directory=str(tmp_path / "ckpt")))
    env.from_source(EndlessSource(stop_at=RECORDS)).rebalance().map(tag_old, name="tag", processes=2).sink_to(sink)
    handle = env.execute_async("patched-pool")
    _wait_for(lambda: handle.status().last_checkpoint is not None)
    at = handle.patch("tag", tag_new, timeout=60)
    _wait_for(lambda: len(sink.committed) >= RECORDS)
    _cancel(handle)
    assert {tag for c, (_, tag) in sink.committed if c <= at} == {"old"}
    assert {tag for c, (_, tag) in sink.committed if c > at} == {"new"}, "the pool runs the patch"
    values = sorted(x for _, (x, _) in sink.committed)
    assert values == list(range(RECORDS)), "every record once"
