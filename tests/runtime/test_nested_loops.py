"""Nested loops (dissertation ch. 6, structured loops): scopes, termination per loop, event time
held per loop, and exactly-once checkpoints across all levels (ABS §4.3, Algorithm 2).

The jobs halve numbers in an inner loop and start them again in an outer one, so every value
computed is known in advance: the committed output must be exactly that multiset.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest

from epochal import (
    CheckpointConfig,
    DataStream,
    GraphError,
    KeyedProcessFunction,
    StreamEnvironment,
    WatermarkStrategy,
)
from epochal.cluster.inprocess import InProcessExecutor
from epochal.connectors import FileSink, read_committed
from epochal.plan.job_graph import JobGraph
from epochal.plan.loops import loop_scopes
from epochal.plan.specs import RecordFnSpec
from epochal.testing import CollectSink, ListSource

Record = tuple[int, int, int]  # (value, passes left, the value a pass starts from)


def inner_loop(loop: DataStream) -> tuple[DataStream, DataStream]:
    """Halve until the value is at most 1; every value leaves the inner loop."""
    half = loop.map(lambda r: (r[0] // 2, r[1], r[2]), name="halve")
    return half.filter(lambda r: r[0] > 1, name="again").key_by(lambda r: r[0]), half


def outer_loop(loop: DataStream) -> tuple[DataStream, DataStream]:
    """Run the inner loop; a record that settled with passes left starts again from its value."""
    values = loop.iterate(inner_loop, name="inner")
    settled = values.filter(lambda r: r[0] <= 1 and r[1] > 0, name="settled")
    return settled.map(lambda r: (r[2], r[1] - 1, r[2]), name="restart").key_by(lambda r: r[2]), values


def expected(inputs: Iterable[Record]) -> list[Record]:
    out = []
    for value, passes, start in inputs:
        for left in range(passes, -1, -1):
            v = value if left == passes else start
            while True:
                v //= 2
                out.append((v, left, start))
                if v <= 1:
                    break
    return sorted(out)


def _inputs(n: int, seed: int = 0) -> list[Record]:
    rng = random.Random(seed)
    return [(v, rng.randrange(0, 4), v) for v in (rng.randrange(2, 1 << 12) for _ in range(n))]


def _nested_job(parallelism: int, inputs: list[Record], out: str | None = None, ckpt: str | None = None,
                seed: int = 0) -> tuple[StreamEnvironment, CollectSink | None]:
    env = StreamEnvironment(
        parallelism=parallelism, executor="inprocess", seed=seed, batch_size=16,
        checkpoint=CheckpointConfig(interval=0.003, directory=ckpt, retain=10_000) if ckpt else None,
    )
    looped = env.from_source(ListSource(inputs, splits=2)).iterate(outer_loop, name="outer")
    if out is None:
        sink = CollectSink()
        looped.sink_to(sink)
        return env, sink
    looped.sink_to(FileSink(out))
    return env, None


# -- scopes ----------------------------------------------------------------------------------------
def test_the_scopes_of_nested_loops() -> None:
    env, _ = _nested_job(2, [(8, 1, 8)])
    job = env.job_graph("nested")
    scopes = loop_scopes(job)
    by_name = {job.vertex(h).chain[0].name: s for h, s in scopes.items()}
    outer, inner = by_name["outer"], by_name["inner"]
    names = {h: {op.name for v in s.members for op in job.vertex(v).chain} for h, s in scopes.items()}
    assert names[inner.head] == {"inner", "halve", "again"}
    assert names[outer.head] == names[inner.head] | {"outer", "settled", "restart"}
    assert (inner.parent, inner.depth, outer.parent, outer.depth) == (outer.head, 1, None, 0)
    assert inner.edges < outer.edges and inner.back_edges <= outer.edges


def test_loops_one_after_the_other_do_not_nest() -> None:
    env = StreamEnvironment(parallelism=1, executor="inprocess")
    stream = env.from_source(ListSource([(8, 0, 8)]))
    stream.iterate(inner_loop, name="a").iterate(inner_loop_named("b"), name="b").sink_to(CollectSink())
    scopes = loop_scopes(env.job_graph("two"))
    assert [s.parent for s in scopes.values()] == [None, None]
    assert not set.intersection(*(set(s.members) for s in scopes.values()))


def inner_loop_named(name: str) -> Any:
    def body(loop: DataStream) -> tuple[DataStream, DataStream]:
        half = loop.map(lambda r: (r[0] // 2, r[1], r[2]), name=f"{name}-halve")
        return half.filter(lambda r: r[0] > 1, name=f"{name}-again"), half

    return body


# -- termination -----------------------------------------------------------------------------------
@pytest.mark.parametrize("parallelism", [1, 2, 3])
def test_nested_loops_end_with_every_value_once(parallelism: int) -> None:
    inputs = _inputs(60, seed=parallelism)
    env, sink = _nested_job(parallelism, inputs)
    env.execute("nested")
    assert sink is not None and sorted(sink.committed()) == expected(inputs)


def test_three_levels_of_loops() -> None:
    """A loop inside a loop inside a loop: each level restarts what the one inside settled."""
    env = StreamEnvironment(parallelism=2, executor="inprocess", batch_size=8)

    def middle(loop: DataStream) -> tuple[DataStream, DataStream]:
        values = loop.iterate(inner_loop, name="inner")
        settled = values.filter(lambda r: r[0] <= 1 and r[1] % 2 == 1, name="odd-settled")
        return settled.map(lambda r: (r[2], r[1] - 1, r[2]), name="again-middle"), values.filter(
            lambda r: r[0] <= 1 and r[1] % 2 == 0 and r[1] > 0, name="to-outer")

    def outer(loop: DataStream) -> tuple[DataStream, DataStream]:
        settled = loop.iterate(middle, name="middle")
        return settled.map(lambda r: (r[2], r[1] - 1, r[2]), name="again-outer").rebalance(), settled

    sink = CollectSink()
    inputs = [(v, p, v) for v, p in [(100, 4), (7, 3), (1000, 2), (33, 1)]]
    env.from_source(ListSource(inputs)).iterate(outer, name="outer").sink_to(sink)
    assert max(s.depth for s in loop_scopes(env.job_graph("three")).values()) == 2
    env.execute("three")
    # a value settles at 1 once per pass; with p passes left and p odd the middle loop starts it
    # again, with p even and > 0 it leaves the middle loop and the outer loop starts it again
    want = sorted((1, p, v) for v, passes, _ in inputs for p in range(passes, 0, -1) if p % 2 == 0)
    assert sorted(tuple(r) for r in sink.committed()) == want


# -- checkpoints and failures ----------------------------------------------------------------------
def _failing(job: JobGraph, fail_at: int) -> JobGraph:
    calls = {"n": 0}

    def fail(r: Any) -> Any:
        calls["n"] += 1
        if calls["n"] == fail_at:
            raise ValueError(f"injected at {fail_at}")
        return (r[0] // 2, r[1], r[2])

    vertices = [
        v.__class__(v.id, tuple(RecordFnSpec(op.name, op.uid, op.kind, fail, op.on_error)
                                if isinstance(op, RecordFnSpec) and op.name == "halve" else op for op in v.chain),
                    v.parallelism, v.active)
        for v in job.vertices
    ]
    return job.__class__(job.name, tuple(vertices), job.edges, job.max_parallelism, job.config)


def test_nested_loops_checkpoint_while_busy_and_crashes_change_nothing_committed(tmp_path: Path) -> None:
    inputs = _inputs(40, seed=7)
    want = expected(inputs)
    periodic = []
    for trial in range(8):
        out, ckpt = str(tmp_path / f"out{trial}"), str(tmp_path / f"c{trial}")
        env, _ = _nested_job(2, inputs, out, ckpt, seed=trial)
        fail_at = random.Random(trial).randrange(40, 900)
        result = InProcessExecutor(seed=trial, virtual_time=True).execute(_failing(env.job_graph("n"), fail_at))
        assert result.restarts == 1, f"trial {trial}: the failure came after the end"
        assert sorted(tuple(r) for r in read_committed(out)) == want, f"trial {trial}"
        periodic.append(sum(1 for c in result.checkpoints if not c.is_final))
    assert min(periodic) >= 3, f"periodic checkpoints per run: {periodic}"


# -- event time ------------------------------------------------------------------------------------
class _Seen(KeyedProcessFunction):
    """Each record with the watermark it arrived under."""

    def process_element(self, value: Any, ctx: Any) -> Iterable[Any]:
        yield (value, ctx.current_watermark())


def _timed(records: int) -> list[tuple[str, float, int]]:
    return [(f"k{i % 3}", float(i), 1 + i % 20) for i in range(records)]


def _halve_time(loop: DataStream) -> tuple[DataStream, DataStream]:
    halved = loop.map(lambda r: (r[0], r[1], r[2] // 2), name="halve-time")
    return halved.filter(lambda r: r[2] > 0, name="again-time").key_by(lambda r: r[1]), halved.filter(
        lambda r: r[2] == 0, name="done-time")


def _late_and_moving(sink: CollectSink, n: int) -> tuple[int, int]:
    seen = sink.committed()
    assert len(seen) == n
    late = sum(1 for (_, ts, _), w in seen if ts < w)
    moving = sum(1 for _, w in seen if math.isfinite(w))
    return late, moving


@pytest.mark.parametrize("parallelism", [1, 2])
def test_a_loop_with_event_time_holds_the_watermark_until_nothing_older_is_in_it(parallelism: int) -> None:
    n = 240
    results = {}
    for timed in (False, True):
        env = StreamEnvironment(parallelism=parallelism, executor="inprocess")
        sink = CollectSink()
        (env.from_source(ListSource(_timed(n), splits=2, batch_size=5),
                         watermarks=WatermarkStrategy.for_monotonous_timestamps(timestamp=1))
            .iterate(_halve_time, name="rounds", timestamp=1 if timed else None)
            .key_by(lambda r: r[0]).process(_Seen()).sink_to(sink))
        env.execute("loop-time")
        results[timed] = _late_and_moving(sink, n)
    assert results[False][0] > 0, "without event time the loop passes the watermark ahead of its records"
    late, moving = results[True]
    assert late == 0, f"{late} records came out of the loop behind its watermark"
    assert moving > n // 2, "the watermark after the loop must move while the job runs"


def test_nested_loops_with_event_time_emit_nothing_late() -> None:
    n = 160
    env = StreamEnvironment(parallelism=2, executor="inprocess")

    def inner(loop: DataStream) -> tuple[DataStream, DataStream]:
        halved = loop.map(lambda r: (r[0], r[1], r[2] // 2, r[3]), name="in-halve")
        return halved.filter(lambda r: r[2] > 1, name="in-again"), halved.filter(lambda r: r[2] <= 1, name="in-out")

    def outer(loop: DataStream) -> tuple[DataStream, DataStream]:
        settled = loop.iterate(inner, name="inner", timestamp=1)
        again = settled.filter(lambda r: r[3] > 0, name="out-again").map(
            lambda r: (r[0], r[1], 16, r[3] - 1), name="out-restart").key_by(lambda r: r[1])
        return again, settled.filter(lambda r: r[3] == 0, name="out-done")

    sink = CollectSink()
    records = [(f"k{i % 3}", float(i), 1 + i % 30, i % 3) for i in range(n)]
    (env.from_source(ListSource(records, splits=2, batch_size=5),
                     watermarks=WatermarkStrategy.for_monotonous_timestamps(timestamp=1))
        .iterate(outer, name="outer", timestamp=1)
        .key_by(lambda r: r[0]).process(_Seen()).sink_to(sink))
    env.execute("nested-time")
    seen = sink.committed()
    assert len(seen) == n
    assert [r for r, w in seen if r[1] < w] == []
    # event time advances while records still flow (it is not held at -inf until the end); how
    # many records see it first depends on the order tasks step in, which wall-clock flushes move
    assert sum(1 for _, w in seen if math.isfinite(w)) > 0


def test_an_event_time_loop_needs_event_time_in_the_loops_inside_it() -> None:
    env = StreamEnvironment(parallelism=1, executor="inprocess")

    def outer(loop: DataStream) -> tuple[DataStream, DataStream]:
        values = loop.iterate(inner_loop, name="untimed")
        return values.filter(lambda r: False), values

    env.from_source(ListSource([(8, 0, 8)])).iterate(outer, name="timed", timestamp=0).sink_to(CollectSink())
    with pytest.raises(GraphError, match=r"'timed' tracks event time .* 'untimed' inside it does not"):
        env.job_graph("refused")


def test_a_window_inside_an_event_time_loop_is_refused() -> None:
    from epochal.windows import Tumbling

    env = StreamEnvironment(parallelism=1, executor="inprocess")

    def body(loop: DataStream) -> tuple[DataStream, DataStream]:
        counted = loop.key_by(lambda r: r[0]).window(Tumbling(1.0)).count()
        return counted.filter(lambda r: False), counted

    (env.from_source(ListSource([("a", 1.0)]), watermarks=WatermarkStrategy.for_monotonous_timestamps(timestamp=1))
        .iterate(body, name="timed", timestamp=1).sink_to(CollectSink()))
    with pytest.raises(GraphError, match=r"inside loop 'timed', which tracks event time: windows"):
        env.job_graph("refused")
