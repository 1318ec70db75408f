"""A broadcast function on a stream not keyed, end to end in process, across a crash of either
input: the broadcast state comes back from its one checkpointed copy into every subtask.

Rules are the numbers 0, 1, 2, ... from one split, so every subtask receives them in that order;
a data record emits the rules its subtask holds. Whatever the interleaving, each data record is
emitted once, with a prefix of the rules: a broadcast state lost by a restore would leave a
record seeing the rules replayed after the checkpoint without those before it.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest
from two_input_jobs import RULES, env_of, with_crash

from epochal import BroadcastProcessFunction
from epochal.cluster.inprocess import InProcessExecutor
from epochal.testing import CollectSink, ListSource


class SeenRules(BroadcastProcessFunction):
    def process_element(self, value: Any, ctx: Any) -> Iterable[Any]:
        yield (value, tuple(sorted(ctx.broadcast_state(RULES).keys())))

    def process_broadcast_element(self, value: Any, ctx: Any) -> None:
        ctx.broadcast_state(RULES).put(value, True)


@pytest.mark.parametrize(("crash", "seed"), [("data", 1), ("rules", 2), ("data", 3)])
def test_a_broadcast_function_not_keyed_restores_its_rules_across_a_crash(tmp_path: Path, crash: str,
                                                                         seed: int) -> None:
    data = [f"d{i}" for i in range(240)]
    rules = list(range(80))
    env = env_of(3, str(tmp_path / "c"), interval=0.002)
    feed = with_crash(data, 150) if crash == "data" else data
    told = with_crash(rules, 50) if crash == "rules" else rules
    stream = env.from_source(ListSource(feed, splits=3, batch_size=2), name="data")
    broadcast = env.from_source(ListSource(told, splits=1, batch_size=1), name="rules")
    sink = CollectSink()
    stream.connect(broadcast.broadcast(RULES)).process(SeenRules()).uid("b").sink_to(sink)
    result = InProcessExecutor(seed=seed, virtual_time=True, step_time=0.001).execute(env.job_graph("broadcast"))
    assert result.restarts == 1 and result.restored_from[1] is not None, "restored from a checkpoint"
    out = sink.committed()
    assert sorted(d for d, _ in out) == sorted(data), "each data record once"
    seen = [tuple(r) for _, r in out]
    assert all(r == tuple(range(len(r))) for r in seen), "every record saw a prefix of the rules"
    assert any(r for r in seen), "some record saw rules"

