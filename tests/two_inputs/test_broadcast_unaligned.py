"""Broadcast state across an unaligned checkpoint, over many schedules.

At an unaligned barrier each subtask fixes its state at the first barrier of the checkpoint; the
broadcast records that barrier overtook go to that subtask's in-flight log, not its state, and
another subtask may have processed them before its own barrier. So the subtasks' broadcast copies
differ at the cut, and a restore must give each subtask its own copy, which its own log completes
(with a single checkpointed copy, subtask 0's, the other subtasks lost the broadcast records in
flight at subtask 0: 11 of the 64 schedules below failed). The seeded scheduler picks the
interleaving: a sweep of seeds finds the cuts that differ.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from two_input_jobs import RULES, broadcast, committed, env_of, expected, records, sources, with_crash

from epochal.cluster.inprocess import InProcessExecutor
from epochal.runtime.operators.broadcast import BroadcastStates
from epochal.testing import CollectSink

SEEDS = range(16)


@pytest.mark.parametrize("crash", ["left", "right"])
@pytest.mark.parametrize("parallelism", [2, 3])
@pytest.mark.parametrize("seed", SEEDS)
def test_broadcast_state_restored_from_an_unaligned_checkpoint_commits_every_result_once(
        tmp_path: Path, seed: int, parallelism: int, crash: str) -> None:
    rng = random.Random(seed)
    left, right = records(rng, 120, "l"), records(rng, 60, "r")
    env = env_of(parallelism, str(tmp_path / "checkpoints"), mode="unaligned")
    sink = CollectSink()
    a, b = sources(env, with_crash(left, 90) if crash == "left" else left,
                   with_crash(right, 45) if crash == "right" else right)
    broadcast(a, b).sink_to(sink)
    result = InProcessExecutor(seed=seed, virtual_time=True, step_time=0.001).execute(env.job_graph("bcast"))
    assert result.restarts == 1
    assert committed(sink.committed()) == expected("broadcast", left, right)


class _Spec:
    name, states = "rules", ("rules",)


def _copy(rules: dict[str, int]) -> dict[str, object]:
    states = BroadcastStates(_Spec())  # type: ignore[arg-type]
    states.maps["rules"].update(rules)
    return states.snapshot()


@pytest.mark.parametrize(("copies", "subtask", "parallelism", "want"), [
    ([{"a": 1}, {"a": 1, "b": 2}], 1, 2, {"a": 1, "b": 2}),  # its own copy, same parallelism
    ([{"a": 1}, {"a": 1, "b": 2}], 0, 2, {"a": 1}),
    ([{"a": 1}, {"a": 1}], 2, 3, {"a": 1}),  # rescaled (aligned): the first copy
    ([{"a": 1}, None], 1, 2, {"a": 1}),  # a checkpoint from when subtask 0 alone wrote one
    ([], 0, 2, {}),
])
def test_a_subtask_restores_its_own_broadcast_copy_at_the_same_parallelism(
        copies: list[dict[str, int] | None], subtask: int, parallelism: int, want: dict[str, int]) -> None:
    """Copies as subtasks snapshot them (None: a subtask that wrote none)."""
    states = [None if c is None else _copy(c) for c in copies]
    restored = BroadcastStates(_Spec())  # type: ignore[arg-type]
    restored.restore(states, subtask, parallelism)
    assert restored.maps == {RULES.name: want}
