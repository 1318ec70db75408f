"""A window over an interval join's output counts every pair: the join holds its output
watermark back by its bounds (`IntervalJoinOperator.output_watermark`), so a pair emitted when
its later side arrives is never behind the watermark the join already forwarded."""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from two_input_jobs import JITTER, env_of, records, sources

from epochal.cluster.inprocess import InProcessExecutor
from epochal.testing import CollectSink
from epochal.windows import Tumbling


def _pair_at(side: str) -> Any:
    def pair(left: dict[str, Any], right: dict[str, Any]) -> dict[str, Any]:
        return {"k": left["k"], "t": (left if side == "left" else right)["t"]}
    return pair


def _batch(left: list[dict[str, Any]], right: list[dict[str, Any]], lower: float, upper: float,
           side: str) -> Counter[tuple[Any, float]]:
    """The batch answer: pairs per key and 1-second window of the chosen side's time."""
    out: Counter[tuple[Any, float]] = Counter()
    for a in left:
        for b in right:
            if a["k"] == b["k"] and a["t"] + lower <= b["t"] <= a["t"] + upper:
                t = (a if side == "left" else b)["t"]
                out[(a["k"], float(int(t)))] += 1
    return out


@pytest.mark.parametrize(("lower", "upper", "side"), [(0.0, 4.0, "left"), (-4.0, 0.0, "right"),
                                                       (-3.0, 2.0, "left"), (-3.0, 2.0, "right")])
def test_a_window_over_an_interval_join_equals_the_batch_answer(tmp_path: Path, lower: float, upper: float,
                                                                side: str) -> None:
    rng = random.Random(5)
    left, right = records(rng, 80, "l", keys=3), records(rng, 80, "r", keys=3)
    # the right side lags the left by up to the bounds: most pairs are made when the later side
    # arrives, long after the watermark passed the earlier side's time
    env = env_of(2, str(tmp_path / "c"))
    sink = CollectSink()
    a, b = sources(env, left, right)
    joined = a.key_by("k").interval_join(b.key_by("k")).between(lower, upper).apply(_pair_at(side))
    joined.key_by("k").window(Tumbling(1.0)).count().sink_to(sink)
    InProcessExecutor(seed=3, virtual_time=True, step_time=0.001).execute(env.job_graph("join-window"))
    got: Counter[tuple[Any, float]] = Counter()
    for row in sink.committed():
        got[(row[0], float(row[1]))] += row[-1]
    assert got == _batch(left, right, lower, upper, side)
    assert JITTER < upper - lower


@pytest.mark.parametrize("side", ["left", "right"])
def test_a_window_over_a_window_join_equals_the_batch_answer(tmp_path: Path, side: str) -> None:
    """A window join emits a window's pairs when the watermark passes its end: it holds its
    watermark back by the window's size, so 1-second windows over its pairs count them all."""
    rng = random.Random(7)
    left, right = records(rng, 80, "l", keys=3), records(rng, 80, "r", keys=3)
    env = env_of(2, str(tmp_path / "c"))
    sink = CollectSink()
    a, b = sources(env, left, right)
    joined = a.join(b).where("k").equal_to("k").window(Tumbling(5.0)).apply(_pair_at(side))
    joined.key_by("k").window(Tumbling(1.0)).count().sink_to(sink)
    InProcessExecutor(seed=3, virtual_time=True, step_time=0.001).execute(env.job_graph("window-join-window"))
    got: Counter[tuple[Any, float]] = Counter()
    for row in sink.committed():
        got[(row[0], float(row[1]))] += row[-1]
    expected: Counter[tuple[Any, float]] = Counter()
    for x in left:
        for y in right:
            if x["k"] == y["k"] and int(x["t"] // 5) == int(y["t"] // 5):
                expected[(x["k"], float(int((x if side == "left" else y)["t"])))] += 1
    assert got == expected


def test_a_rewritten_graph_keeps_which_input_an_edge_feeds() -> None:
    """The local phase of a window after a join renumbers the graph: the join's second input
    stays its second (it once became a first, and the join met no right record)."""
    env = env_of(2, "unused")
    a, b = sources(env, [], [])
    joined = a.key_by("k").interval_join(b.key_by("k")).between(0.0, 1.0).apply(_pair_at("left"))
    joined.key_by("k").window(Tumbling(1.0)).count().sink_to(CollectSink())
    edges = env.job_graph("inputs").edges
    assert sorted(e.input for e in edges if e.target == 2) == [0, 1]
