"""Parallel recovery's plan (`runtime.master.recovery`): the lost subtasks' key groups go to their
backups' holders, spread over them, and come back by the moves it returns."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, cast

from epochal import CheckpointConfig, StreamEnvironment
from epochal.plan.job_graph import JobGraph
from epochal.runtime.master.recovery import recovery_plan
from epochal.state.backups import holders
from epochal.state.keygroups import RoutingTable
from epochal.state.manifest import Manifest
from epochal.testing import CollectSink, ListSource


def _job(parallelism: int, loop: bool = False) -> JobGraph:
    env = StreamEnvironment(parallelism=parallelism, executor="inprocess", checkpoint=CheckpointConfig(directory="x"))
    stream = env.from_source(ListSource(list(range(10)))).key_by(lambda x: x % 3).count()
    if loop:  # a loop's feedback edge: its key groups cannot move while the job runs
        stream = stream.map(lambda kv: kv[1]).iterate(lambda s: (s.map(lambda n: n // 2).filter(bool), s))
    stream.sink_to(CollectSink())
    return env.job_graph("recovery")


def _manifest(routing: RoutingTable | None) -> Manifest:
    return cast(Manifest, SimpleNamespace(routing=routing))


def test_the_lost_groups_go_to_the_holders_and_are_given_back() -> None:
    job = _job(4)
    plan = recovery_plan(job, _manifest(None), {1}, lambda w: holders(w, 4, 2))
    assert plan is not None
    before = RoutingTable.contiguous(4, 128)
    lost = set(before.key_groups_of(1))
    assert set(plan.give_back) == lost and set(plan.give_back.values()) == {1}
    assert not plan.table.key_groups_of(1), "the new process must start owning nothing"
    to = [plan.table.owners[g] for g in sorted(lost)]
    assert set(to) == {2, 3} and abs(to.count(2) - to.count(3)) <= 1, "not spread over both holders"
    for g in range(128):  # the others stay
        if g not in lost:
            assert plan.table.owners[g] == before.owners[g]
    assert plan.table.moved(plan.give_back).owners == before.owners


def test_a_holder_that_died_too_is_skipped_and_a_lost_worker_without_holders_keeps_its_groups() -> None:
    job = _job(3)
    plan = recovery_plan(job, _manifest(None), {0, 1}, lambda w: holders(w, 3, 1))
    assert plan is not None
    assert set(plan.give_back.values()) == {1}, "worker 0's holder (1) is lost too: its groups stay"
    assert set(plan.table.owners) == {0, 2}


def test_nothing_to_plan_without_a_checkpoint_or_when_groups_cannot_move() -> None:
    assert recovery_plan(_job(2), None, {0}, lambda w: [1 - w]) is None
    assert recovery_plan(_job(2, loop=True), _manifest(None), {0}, lambda w: [1 - w]) is None
    any_manifest: Any = _manifest(RoutingTable.contiguous(2, 128))
    assert recovery_plan(_job(2), any_manifest, {0}, lambda w: [1 - w]) is not None
