"""A new owner whose read-ahead failed is asked to read ahead again, from a newer checkpoint."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from epochal import CheckpointConfig, StreamEnvironment
from epochal.plan.job_graph import TaskId
from epochal.runtime.master.control import JobControl
from epochal.runtime.master.migrations import READ_AGAIN, Migration, Migrations
from epochal.runtime.wire.messages import KeyGroupsPrepared, PrepareKeyGroups
from epochal.state.keygroups import RoutingTable
from epochal.testing import CollectSink, ListSource


def _migrations(tmp_path: Any) -> tuple[Migrations, list[tuple[TaskId, object]], TaskId]:
    env = StreamEnvironment(parallelism=2, checkpoint=CheckpointConfig(directory=str(tmp_path)))
    env.from_source(ListSource(list(range(10)))).key_by(lambda x: x).count().uid("count").sink_to(CollectSink())
    job = env.job_graph("again")
    sent: list[tuple[TaskId, object]] = []
    migrations = Migrations(job, JobControl("again", 2), True)
    migrations.send = lambda task, message: sent.append((task, message))
    current = RoutingTable.contiguous(2, 128)
    migrations.current = Migration.plan(job, current, current.moved({0: 1}), 0.0, None)
    migrations.current.prepared_from = 5
    (owner,) = migrations.current.new_owners
    return migrations, sent, owner


def _coordinator(*ids: int) -> Any:
    return SimpleNamespace(completed=[SimpleNamespace(checkpoint_id=i, manifest=f"manifest {i}") for i in ids],
                           trigger=lambda reroute: 99, is_stopped=False, final_checkpoint=None, routing=None)


def test_a_failed_read_ahead_is_asked_again_from_the_newest_checkpoint(tmp_path) -> None:
    migrations, sent, owner = _migrations(tmp_path)
    migrations.prepared(KeyGroupsPrepared(owner, 5, read=False), _coordinator(5, 6, 7))
    assert [(t, type(m), m.manifest) for t, m in sent] == [(owner, PrepareKeyGroups, "manifest 7")]
    assert migrations.current.checkpoint_id is None  # not triggered: waiting for the new read
    migrations.prepared(KeyGroupsPrepared(owner, 5, read=True), _coordinator(5, 6, 7))  # stale: ignored
    assert migrations.current.checkpoint_id is None
    migrations.prepared(KeyGroupsPrepared(owner, 7, read=True), _coordinator(5, 6, 7))
    assert migrations.current.checkpoint_id == 99  # read: the rerouting checkpoint starts


def test_without_a_newer_checkpoint_or_after_the_last_attempt_the_move_goes_on(tmp_path) -> None:
    migrations, sent, owner = _migrations(tmp_path)
    migrations.prepared(KeyGroupsPrepared(owner, 5, read=False), _coordinator(5))
    assert sent == [] and migrations.current.checkpoint_id == 99  # it reads its groups when they move
    migrations, sent, owner = _migrations(tmp_path)
    for attempt in range(READ_AGAIN):
        migrations.prepared(KeyGroupsPrepared(owner, 5 + attempt, read=False), _coordinator(*range(5, 7 + attempt)))
    assert len(sent) == READ_AGAIN and migrations.current.checkpoint_id is None
    migrations.prepared(KeyGroupsPrepared(owner, 5 + READ_AGAIN, read=False), _coordinator(*range(5, 20)))
    assert len(sent) == READ_AGAIN and migrations.current.checkpoint_id == 99
