"""Loops: iterate(), back-edges, ABS Algorithm 2 (loop logs), termination, recovery."""

from __future__ import annotations

import importlib
import os
import random
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from epochal import CheckpointConfig, DataStream, GraphError, StreamEnvironment
from epochal.cluster.inprocess import InProcessExecutor
from epochal.connectors import read_committed
from epochal.plan.job_graph import JobGraph
from epochal.plan.specs import RecordFnSpec
from epochal.runtime.operators import LoopLog
from epochal.state.snapshot_files import decode_operator_state
from epochal.state.storage import CheckpointStorage
from epochal.testing import CollectSink, ListSource

EXAMPLES = os.path.join(os.path.dirname(__file__), "..", "..", "..", "examples")
sys.path.insert(0, os.path.abspath(EXAMPLES))
cc: Any = importlib.import_module("connected_components")
components, final_labels, random_graph = cc.components, cc.final_labels, cc.random_graph


def _halving(env: StreamEnvironment, values: list[int]) -> CollectSink:
    sink = CollectSink()

    def halve(loop: DataStream) -> tuple[DataStream, DataStream]:
        halved = loop.map(lambda n: n // 2, name="halve")
        return halved.filter(lambda n: n > 0, name="positive"), halved

    env.from_source(ListSource(values, splits=2)).iterate(halve, name="loop").sink_to(sink)
    return sink


def _expected_halving(values: list[int]) -> list[int]:
    out = []
    for v in values:
        while True:
            v //= 2
            out.append(v)
            if v == 0:
                break
    return sorted(out)


def test_the_feedback_edge_is_the_back_edge_and_the_loop_edges_are_marked() -> None:
    env = StreamEnvironment(parallelism=2, executor="inprocess")
    _halving(env, [1])
    job = env.job_graph("loop")
    back = [e for e in job.edges if e.is_back_edge]
    assert len(back) == 1
    head = job.vertex(back[0].target)
    assert head.chain[0].name == "loop"
    in_loop = {(job.vertex(e.source).name, job.vertex(e.target).name) for e in job.edges if e.in_loop}
    assert in_loop == {("loop -> halve", "positive"), ("positive", "loop -> halve")}


def test_a_body_must_return_two_streams() -> None:
    env = StreamEnvironment(parallelism=1, executor="inprocess")
    with pytest.raises(GraphError, match=r"\(feedback, output\)"):
        env.from_source(ListSource([1])).iterate(lambda loop: loop)  # type: ignore[arg-type, return-value]


@pytest.mark.parametrize("parallelism", [1, 2, 3])
def test_a_bounded_loop_ends_when_its_input_is_exhausted_and_the_loop_is_empty(parallelism: int) -> None:
    values = [5, 17, 1000, 3, 64, 999_999]
    env = StreamEnvironment(parallelism=parallelism, executor="inprocess")
    sink = _halving(env, values)
    env.execute("halving")
    assert sorted(sink.committed()) == _expected_halving(values)


def test_heavy_feedback_with_tiny_channels_does_not_deadlock() -> None:
    # Every record comes back 3 times per round for 6 rounds: the loop carries far more than
    # its channels hold, so a loop whose back-edges applied backpressure would wait on itself.
    env = StreamEnvironment(parallelism=2, executor="inprocess", channel_capacity=1, batch_size=4)
    sink = CollectSink()

    def fan_out(loop: DataStream) -> tuple[DataStream, DataStream]:
        spread = loop.flat_map(lambda r: [(r[0], r[1] + 1)] * 3 if r[1] < 6 else [], name="spread")
        return spread.rebalance(), loop.filter(lambda r: r[1] == 6, name="done")

    env.from_source(ListSource([(i, 0) for i in range(8)], splits=2)).iterate(fan_out).sink_to(sink)
    env.execute("heavy")
    assert len(sink.committed()) == 8 * 3**6


def _failing_after(f: Callable[[Any], Any], failing: Callable[[Any], Any]) -> Callable[[Any], Any]:
    return lambda m: failing(f(m))


def _components_job(
    graph: list[tuple[int, int]], out: str, ckpt: str, fail_at: int | None, seed: int, mode: str = "aligned"
) -> JobGraph:
    env = StreamEnvironment(
        parallelism=2, executor="inprocess", seed=seed, batch_size=8,
        checkpoint=CheckpointConfig(interval=0.003, directory=ckpt, retain=10_000, mode=mode),  # type: ignore[arg-type]
    )
    calls = {"n": 0}

    def failing(record: Any) -> Any:
        calls["n"] += 1
        if fail_at is not None and calls["n"] == fail_at:
            raise ValueError(f"injected at {fail_at}")
        return record

    edges = ListSource(graph, splits=2)
    components(env, edges, out)
    job = env.job_graph("components")
    if fail_at is not None:  # fail inside the loop: in the feedback path, once
        vertices = []
        for v in job.vertices:
            chain = tuple(
                replace(op, fn=_failing_after(op.fn, failing))
                if isinstance(op, RecordFnSpec) and op.name == "unwrap-feedback" else op
                for op in v.chain
            )
            vertices.append(replace(v, chain=chain))
        job = replace(job, vertices=tuple(vertices))
        names = [op.name for v in job.vertices for op in v.chain if isinstance(op, RecordFnSpec)]
        assert "unwrap-feedback" in names
    return job


def test_connected_components_survive_random_failures_inside_the_loop(tmp_path: Path) -> None:
    graph = random_graph(vertices=60, edges=70, seed=3)
    baseline = str(tmp_path / "base")
    job = _components_job(graph, baseline, str(tmp_path / "c0"), None, 0)
    InProcessExecutor(seed=0, virtual_time=True).execute(job)
    expected = final_labels(tuple(r) for r in read_committed(baseline))
    assert len(set(expected.values())) < len(expected)  # components were merged: labels flowed round

    restored_with_log = 0
    for trial in range(20):
        rng = random.Random(trial)
        out, ckpt = str(tmp_path / f"out{trial}"), str(tmp_path / f"ckpt{trial}")
        job = _components_job(graph, out, ckpt, fail_at=rng.randrange(1, 400), seed=trial)
        result = InProcessExecutor(seed=trial, virtual_time=True).execute(job)
        assert result.restarts == 1, f"trial {trial}"
        assert final_labels(tuple(r) for r in read_committed(out)) == expected, f"trial {trial}"
        restored = result.restored_from[-1]
        if restored is not None and _loop_log_records(ckpt, restored) > 0:
            restored_with_log += 1
    assert restored_with_log >= 3, "restores must replay logged loop records"


def test_a_loop_under_unaligned_checkpoints_survives_failures_exactly(tmp_path: Path) -> None:
    """Loop tasks align their barriers (ABS Algorithm 2 logs their back edges); the tasks around
    the loop take the same barriers unaligned, logging their inputs: both logs restore together."""
    graph = random_graph(vertices=60, edges=70, seed=3)
    baseline = str(tmp_path / "base")
    job = _components_job(graph, baseline, str(tmp_path / "c0"), None, 0)
    InProcessExecutor(seed=0, virtual_time=True).execute(job)
    expected = final_labels(tuple(r) for r in read_committed(baseline))
    for trial in range(8):
        rng = random.Random(100 + trial)
        out, ckpt = str(tmp_path / f"out{trial}"), str(tmp_path / f"ckpt{trial}")
        job = _components_job(graph, out, ckpt, fail_at=rng.randrange(1, 400), seed=trial, mode="unaligned")
        result = InProcessExecutor(seed=trial, virtual_time=True).execute(job)
        assert result.restarts == 1, f"trial {trial}"
        assert final_labels(tuple(r) for r in read_committed(out)) == expected, f"trial {trial}"


def _loop_log_records(ckpt: str, checkpoint_id: int) -> int:
    storage = CheckpointStorage(ckpt)
    manifest = storage.load_manifest(checkpoint_id)
    total = 0
    for op in manifest.operators:
        for st in op.subtasks:
            if st.operator is not None:
                state = decode_operator_state(storage.read_file(st.operator))
                if isinstance(state, LoopLog):
                    total += state.records
    return total


def test_snapshots_hold_loop_logs_and_only_loop_heads_store_channel_records(tmp_path: Path) -> None:
    graph = random_graph(vertices=60, edges=70, seed=5)
    ckpt = str(tmp_path / "ckpt")
    InProcessExecutor(seed=4, virtual_time=True).execute(_components_job(graph, str(tmp_path / "out"), ckpt, None, 4))
    storage = CheckpointStorage(ckpt)
    logged = 0
    for checkpoint_id in storage.complete_checkpoints():
        manifest = storage.load_manifest(checkpoint_id)
        for op in manifest.operators:
            for st in op.subtasks:
                if st.operator is None:
                    continue
                state = decode_operator_state(storage.read_file(st.operator))
                if op.uid == "loop":
                    assert isinstance(state, LoopLog)
                    logged += state.records
                else:  # sources keep positions, sinks committables: never records in flight
                    assert not isinstance(state, LoopLog), op.uid
    assert logged > 0, "some checkpoint must have caught feedback in flight"
