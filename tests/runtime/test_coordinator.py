"""Tests of `epochal.runtime.master.coordinator`: pending checkpoints and the checkpoint coordinator."""

from __future__ import annotations

import math
from collections import deque
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

import epochal
from epochal.config import CheckpointConfig
from epochal.errors import CheckpointError
from epochal.plan.job_graph import JobGraph, TaskId
from epochal.runtime.checkpoints import AbortReason, CompletedCheckpoint
from epochal.runtime.clock import VirtualClock
from epochal.runtime.master.coordinator import AckResult, CheckpointCoordinator, PendingCheckpoint
from epochal.runtime.wire.messages import (
    AcknowledgeCheckpoint,
    DeclineCheckpoint,
    InputsEnded,
    NotifyCheckpointAborted,
    NotifyCheckpointComplete,
    TriggerCheckpoint,
)
from epochal.state.keygroups import RoutingTable
from epochal.state.manifest import Manifest, TaskCheckpointStats
from epochal.state.storage import CheckpointStorage
from epochal.testing import CollectSink, ListSource


def tiny_job(config: CheckpointConfig, source_parallelism: int = 2, parallelism: int = 2) -> JobGraph:
    """source (xS) --key_group--> count -> sink (xP)."""
    env = epochal.StreamEnvironment(parallelism, executor="inprocess", checkpoint=config)
    source = env.from_source(ListSource(["a", "b", "c"])).set_parallelism(source_parallelism)
    source.key_by(lambda x: x).count().sink_to(CollectSink())
    return env.job_graph("tiny")


def ack(task: TaskId, checkpoint_id: int) -> AcknowledgeCheckpoint:
    return AcknowledgeCheckpoint(task, checkpoint_id, (), TaskCheckpointStats(str(task), 0.0, 0.0, 0.0, 0))


class Harness:
    """A coordinator with a virtual clock and a fake `send` that records every message."""

    def __init__(self, config: CheckpointConfig, storage: CheckpointStorage | None = None, **job_kw: Any) -> None:
        self.job = tiny_job(config, **job_kw)
        self.clock = VirtualClock()
        self.sent: list[tuple[TaskId, Any]] = []
        self.failures: list[CheckpointError] = []  # what the failure manager was told
        self.coordinator = CheckpointCoordinator(
            self.job, storage, self.clock, self._send, on_failure=self.failures.append
        )
        self.tasks = self.job.task_ids()
        self.sources = [t for t in self.tasks if self.job.vertex(t.vertex).is_source]
        self.others = [t for t in self.tasks if t not in self.sources]

    def _send(self, task: TaskId, message: Any) -> None:
        self.sent.append((task, message))

    def take_sent(self) -> list[tuple[TaskId, Any]]:
        out, self.sent = self.sent, []
        return out

    def at(self, t: float) -> None:
        self.clock.advance(t - self.clock.now())
        self.coordinator.tick()

    def ack_all(self, checkpoint_id: int) -> None:
        for task in self.tasks:
            assert self.coordinator.on_acknowledge(ack(task, checkpoint_id)) is AckResult.ACCEPTED


PERIODIC = CheckpointConfig(interval=1.0, directory="unused", timeout=10.0)


# -- PendingCheckpoint ------------------------------------------------------------------------------
TASKS = [TaskId(0, 0), TaskId(0, 1), TaskId(1, 0)]


@given(st.lists(st.sampled_from(TASKS + [TaskId(9, 9)]), max_size=12))
def test_pending_checkpoint_is_complete_iff_every_task_acknowledged(acks: list[TaskId]) -> None:
    pending = PendingCheckpoint(5, 0.0, 0.0, False, set(TASKS))
    seen: set[TaskId] = set()
    for task in acks:
        result = pending.acknowledge(ack(task, 5))
        if task not in TASKS:
            assert result is AckResult.UNKNOWN_TASK
        elif task in seen:
            assert result is AckResult.DUPLICATE
        else:
            assert result is AckResult.ACCEPTED
            seen.add(task)
        assert pending.is_fully_acknowledged == (seen == set(TASKS))
        assert pending.awaiting == set(TASKS) - seen
    assert set(pending.acks) == seen


def test_pending_checkpoint_completes_only_when_fully_acknowledged() -> None:
    manifest = Manifest(5, "tiny", 0.0, 0.0, ())
    pending = PendingCheckpoint(5, 0.0, 0.0, False, set(TASKS))
    for task in TASKS[:-1]:
        pending.acknowledge(ack(task, 5))
    with pytest.raises(AssertionError):
        pending.complete(manifest)
    pending.acknowledge(ack(TASKS[-1], 5))
    assert pending.complete(manifest) == CompletedCheckpoint(5, manifest)
    aborted = pending.abort(AbortReason.EXPIRED, "late")
    assert (aborted.checkpoint_id, aborted.reason, aborted.detail) == (5, AbortReason.EXPIRED, "late")


def test_pending_manifest_lists_every_operator_of_the_job() -> None:
    h = Harness(PERIODIC)
    pending = PendingCheckpoint(3, 0.0, 0.0, True, set())
    manifest = pending.manifest(h.job)
    assert [op.uid for op in manifest.operators] == h.job.operator_uids()
    assert manifest.checkpoint_id == 3 and manifest.is_final and manifest.job_name == "tiny"


# -- the coordinator, example by example -------------------------------------------------------------
def test_periodic_trigger_goes_to_the_sources_only() -> None:
    h = Harness(PERIODIC)
    h.at(0.5)
    assert h.take_sent() == []
    h.at(1.0)
    assert h.take_sent() == [(t, TriggerCheckpoint(1, 1.0, False)) for t in h.sources]
    assert list(h.coordinator.pending) == [1]


def test_a_checkpoint_completes_when_every_task_acknowledged_and_all_are_notified() -> None:
    h = Harness(PERIODIC)
    h.at(1.0)
    h.take_sent()
    for task in h.tasks[:-1]:
        assert h.coordinator.on_acknowledge(ack(task, 1)) is AckResult.ACCEPTED
        assert h.coordinator.on_acknowledge(ack(task, 1)) is AckResult.DUPLICATE
    assert h.coordinator.completed == [] and h.take_sent() == []
    assert h.coordinator.on_acknowledge(ack(h.tasks[-1], 1)) is AckResult.ACCEPTED
    assert [c.checkpoint_id for c in h.coordinator.completed] == [1]
    assert h.take_sent() == [(t, NotifyCheckpointComplete(1, False)) for t in h.tasks]
    assert h.coordinator.on_acknowledge(ack(h.tasks[0], 1)) is AckResult.LATE
    assert h.coordinator.on_acknowledge(ack(h.tasks[0], 99)) is AckResult.UNKNOWN_CHECKPOINT
    assert h.coordinator.on_acknowledge(ack(TaskId(7, 0), 1)) is AckResult.LATE


def test_a_long_run_keeps_only_its_latest_checkpoints() -> None:
    """A job checkpointing every second runs for weeks: the coordinator keeps the latest few
    completed and aborted checkpoints (their manifests), not every one."""
    h = Harness(CheckpointConfig(interval=1.0, directory="unused", timeout=0.5, tolerable_failures=1_000))
    for n in range(1, 41):
        h.at(float(2 * n))
        h.take_sent()
        if n % 2:
            for task in h.tasks:
                h.coordinator.on_acknowledge(ack(task, n))
        else:
            h.at(2 * n + 0.9)  # expires unacknowledged
    assert [c.checkpoint_id for c in h.coordinator.completed] == list(range(9, 40, 2))
    assert [a.checkpoint_id for a in h.coordinator.aborted] == list(range(10, 41, 2))


def test_an_unknown_task_does_not_count() -> None:
    h = Harness(PERIODIC)
    h.at(1.0)
    assert h.coordinator.on_acknowledge(ack(TaskId(7, 0), 1)) is AckResult.UNKNOWN_TASK
    assert h.coordinator.pending[1].awaiting == set(h.tasks)


def test_timeout_expiry_aborts_and_fails_past_tolerable_failures() -> None:
    h = Harness(CheckpointConfig(interval=1.0, directory="unused", timeout=5.0, tolerable_failures=1))
    h.at(1.0)  # checkpoint 1
    h.at(5.9)  # just before the timeout: not yet expired
    assert list(h.coordinator.pending) == [1]
    h.at(6.5)  # expired (1 failure, tolerated); a new one starts at once
    assert [(a.checkpoint_id, a.reason) for a in h.coordinator.aborted] == [(1, AbortReason.EXPIRED)]
    assert list(h.coordinator.pending) == [2]
    h.at(12.0)  # checkpoint 2 expires too: more than the one failure tolerated
    (failure,) = h.failures
    assert "2 consecutive" in str(failure)
    assert [a.checkpoint_id for a in h.coordinator.aborted] == [1, 2]
    h.at(20.0)  # the attempt has failed: the coordinator triggers nothing more
    assert h.coordinator.pending == {} and h.coordinator.is_stopped


def test_a_completion_resets_the_failure_count() -> None:
    h = Harness(CheckpointConfig(interval=1.0, directory="unused", timeout=5.0, tolerable_failures=1))
    h.at(1.0)
    h.at(6.5)  # 1 expires, 2 triggered
    h.ack_all(2)
    h.at(7.5)  # 3
    h.at(13.0)  # 3 expires: one failure since the completion, tolerated
    assert [a.checkpoint_id for a in h.coordinator.aborted] == [1, 3]


def test_zero_tolerable_failures_fails_on_the_first_expiry() -> None:
    h = Harness(CheckpointConfig(interval=1.0, directory="unused", timeout=2.0))
    h.at(1.0)
    assert h.failures == []
    h.at(3.5)
    assert len(h.failures) == 1


def test_a_decline_aborts_the_checkpoint() -> None:
    h = Harness(CheckpointConfig(interval=1.0, directory="unused", tolerable_failures=5))
    h.at(1.0)
    h.coordinator.on_decline(DeclineCheckpoint(h.tasks[2], 1, "alignment abandoned"))
    (aborted,) = h.coordinator.aborted
    assert aborted.reason is AbortReason.DECLINED and "alignment abandoned" in aborted.detail
    assert h.coordinator.pending == {}
    assert h.coordinator.on_acknowledge(ack(h.tasks[0], 1)) is AckResult.LATE
    h.coordinator.on_decline(DeclineCheckpoint(h.tasks[2], 1, "again"))  # already gone: ignored
    assert len(h.coordinator.aborted) == 1


def test_max_concurrent_and_min_pause_are_respected() -> None:
    h = Harness(CheckpointConfig(interval=1.0, directory="unused", min_pause=3.0, max_concurrent=2))
    h.at(1.0)
    h.at(2.0)
    h.at(3.0)  # two in flight already
    assert list(h.coordinator.pending) == [1, 2]
    h.ack_all(1)  # completes at 3.0
    h.at(5.9)  # a slot is free, the interval passed, but the pause since completion has not
    assert list(h.coordinator.pending) == [2]
    h.at(6.0)
    assert list(h.coordinator.pending) == [2, 3]


def test_a_newer_completion_subsumes_older_pending_checkpoints() -> None:
    h = Harness(CheckpointConfig(interval=1.0, directory="unused", max_concurrent=3))
    h.at(1.0)
    h.at(2.0)
    h.ack_all(2)
    assert h.coordinator.pending == {}
    assert [c.checkpoint_id for c in h.coordinator.completed] == [2]
    assert h.coordinator.on_acknowledge(ack(h.tasks[0], 1)) is AckResult.LATE


def test_ids_continue_from_the_first_checkpoint_id() -> None:
    h = Harness(PERIODIC)
    coordinator = CheckpointCoordinator(h.job, None, h.clock, h._send, first_checkpoint_id=41)
    assert coordinator.trigger() == 41
    assert coordinator.trigger() == 42


def test_tasks_that_ended_are_triggered_directly() -> None:
    h = Harness(CheckpointConfig(interval=1.0, directory="unused", max_concurrent=2))
    h.at(1.0)
    h.take_sent()
    downstream = h.others[0]
    h.coordinator.on_acknowledge(ack(h.sources[0], 1))
    h.coordinator.on_inputs_ended(InputsEnded(downstream))
    # checkpoint 1 is under way and the task can no longer get its barrier: triggered here
    assert h.take_sent() == [(downstream, TriggerCheckpoint(1, 1.0, False))]
    h.coordinator.on_inputs_ended(InputsEnded(h.sources[0]))  # a source got its trigger already
    assert h.take_sent() == []
    h.at(2.0)
    assert h.take_sent() == [
        (t, TriggerCheckpoint(2, 2.0, False)) for t in h.tasks if t in h.sources or t == downstream
    ]


def test_an_ended_task_that_acknowledged_is_not_triggered_again() -> None:
    h = Harness(PERIODIC)
    h.at(1.0)
    h.take_sent()
    h.coordinator.on_acknowledge(ack(h.others[0], 1))
    h.coordinator.on_inputs_ended(InputsEnded(h.others[0]))
    assert h.take_sent() == []


def test_final_checkpoint_once_every_task_ended() -> None:
    h = Harness(CheckpointConfig(interval=1.0, directory="unused", timeout=100.0))
    h.at(1.0)  # 1, pending
    h.take_sent()
    for task in h.tasks[:-1]:
        h.coordinator.on_inputs_ended(InputsEnded(task))
    assert h.coordinator.final_checkpoint is None
    h.take_sent()
    h.coordinator.on_inputs_ended(InputsEnded(h.tasks[-1]))
    final = h.coordinator.final_checkpoint
    assert final == 2
    sent = h.take_sent()
    assert (h.tasks[-1], TriggerCheckpoint(1, 1.0, False)) in sent  # the pending one, directly
    assert [m for m in sent if m[1].checkpoint_id == 2] == [(t, TriggerCheckpoint(2, 1.0, True)) for t in h.tasks]
    h.at(50.0)  # no periodic checkpoint after the final one
    assert set(h.coordinator.pending) <= {1, 2} and h.coordinator._next_id == 3
    h.ack_all(2)
    assert h.coordinator.final_completed
    assert h.take_sent() == [(t, NotifyCheckpointComplete(2, True)) for t in h.tasks]
    assert h.coordinator.next_deadline() is None


def test_an_aborted_final_checkpoint_is_retried() -> None:
    h = Harness(CheckpointConfig(interval=None, timeout=2.0, tolerable_failures=3))
    for task in h.tasks:
        h.coordinator.on_inputs_ended(InputsEnded(task))
    assert h.coordinator.final_checkpoint == 1
    h.at(2.5)
    assert [(a.checkpoint_id, a.reason) for a in h.coordinator.aborted] == [(1, AbortReason.EXPIRED)]
    assert h.coordinator.final_checkpoint == 2 and h.coordinator.pending[2].is_final
    h.ack_all(2)
    assert h.coordinator.final_completed


def test_without_a_directory_there_are_no_periodic_checkpoints() -> None:
    h = Harness(CheckpointConfig(interval=1.0, directory=None))
    h.at(100.0)
    assert h.coordinator.pending == {} and h.take_sent() == []
    assert h.coordinator.next_deadline() is None


def test_stop_aborts_everything_without_failing() -> None:
    h = Harness(CheckpointConfig(interval=1.0, directory="unused", max_concurrent=2))
    h.at(1.0)
    h.at(2.0)
    h.coordinator.stop(AbortReason.TASK_FAILED)
    assert h.coordinator.pending == {}
    assert [(a.checkpoint_id, a.reason) for a in h.coordinator.aborted] == [
        (1, AbortReason.TASK_FAILED),
        (2, AbortReason.TASK_FAILED),
    ]


def test_next_deadline_is_the_next_trigger_or_timeout() -> None:
    h = Harness(CheckpointConfig(interval=2.0, directory="unused", timeout=3.0, min_pause=5.0))
    assert h.coordinator.next_deadline() == 2.0
    h.at(2.0)
    assert h.coordinator.next_deadline() == 4.0  # next interval (the pause counts from a completion)
    h.ack_all(1)
    assert h.coordinator.next_deadline() == 7.0  # completion at 2.0 + min_pause


def test_tick_at_next_deadline_expires_the_checkpoint() -> None:
    h = Harness(CheckpointConfig(interval=None, timeout=3.0, tolerable_failures=5))
    h.coordinator.trigger()
    h.at(h.coordinator.next_deadline())
    assert h.coordinator.pending == {}


def test_completion_writes_the_manifest_and_applies_retention(tmp_path) -> None:  # noqa: ANN001
    storage = CheckpointStorage(str(tmp_path / "ckpt"))
    h = Harness(CheckpointConfig(interval=1.0, directory=str(tmp_path / "ckpt"), retain=1), storage)
    for n, t in enumerate((1.0, 2.0, 3.0), start=1):
        h.at(t)
        h.ack_all(n)
    assert storage.complete_checkpoints() == [3]
    manifest = storage.latest()
    assert manifest.checkpoint_id == 3 and manifest.job_name == "tiny"
    assert {t.task for t in manifest.tasks} == {str(t) for t in h.tasks}


def test_a_failed_manifest_write_aborts_the_checkpoint() -> None:
    class BrokenStorage:
        discarded: list[int] = []

        def write_manifest(self, manifest: Manifest) -> None:
            raise CheckpointError("disk full")

        def discard(self, checkpoint_id: int) -> None:
            self.discarded.append(checkpoint_id)

    storage = BrokenStorage()
    h = Harness(CheckpointConfig(interval=1.0, directory="unused", tolerable_failures=1), storage)  # type: ignore[arg-type]
    h.at(1.0)
    h.take_sent()
    h.ack_all(1)
    assert h.coordinator.completed == []
    assert [(a.checkpoint_id, a.reason) for a in h.coordinator.aborted] == [(1, AbortReason.STORAGE_FAILED)]
    assert storage.discarded == [1]
    assert not any(isinstance(m, NotifyCheckpointComplete) for _, m in h.take_sent())  # nobody commits


# -- the coordinator against a model, under any order of events ------------------------------------------
class CoordinatorMachine(RuleBasedStateMachine):
    """Drives a coordinator with ticks, acks (in any order, duplicated, late), declines and ends.

    The model is a plain dict of pending checkpoints and the acks each one saw; every response
    and every message sent is compared with it, and the protocol invariants are checked on the
    coordinator's own record after every step.
    """

    @initialize(
        interval=st.sampled_from([1.0, 2.0]),
        timeout=st.sampled_from([1.5, 4.0, 20.0]),
        min_pause=st.sampled_from([0.0, 0.5, 2.5]),
        max_concurrent=st.integers(1, 3),
        tolerable=st.integers(0, 3),
        source_parallelism=st.integers(1, 2),
        parallelism=st.integers(1, 2),
    )
    def setup(self, interval, timeout, min_pause, max_concurrent, tolerable, source_parallelism, parallelism) -> None:  # noqa: ANN001
        self.config = CheckpointConfig(
            interval=interval,
            directory="unused",
            timeout=timeout,
            min_pause=min_pause,
            max_concurrent=max_concurrent,
            tolerable_failures=tolerable,
        )
        self.h = Harness(self.config, source_parallelism=source_parallelism, parallelism=parallelism)
        self.c = self.h.coordinator
        self.tasks = self.h.tasks
        self.sources = set(self.h.sources)
        # the model
        self.pending: dict[int, dict[str, Any]] = {}
        self.completed: list[int] = []
        self.aborted: list[tuple[int, AbortReason]] = []
        self.recent: deque[int] = deque(maxlen=64)
        self.next_id = 1
        self.ended: set[TaskId] = set()
        self.failures = 0
        self.failed = False
        self.final: int | None = None
        self.last_trigger = 0.0
        self.last_completion = -math.inf
        # history, for the invariants
        self.triggers: list[tuple[int, float, bool, int]] = []  # id, time, is_final, event number
        self.completions: list[tuple[float, int]] = []  # time, event number

    # -- the model's transitions --------------------------------------------------------------
    def _trigger(self, is_final: bool, expected: list) -> None:  # noqa: ANN001
        cid, now = self.next_id, self.h.clock.now()
        self.next_id += 1
        self.last_trigger = now
        self.pending[cid] = {"acked": set(), "at": now, "final": is_final}
        done = self.completed[-1] if self.completed else 0  # the newest complete, told to the tasks
        expected += [
            (t, TriggerCheckpoint(cid, now, is_final, False, done))
            for t in self.tasks
            if t in self.sources or t in self.ended
        ]
        if is_final:
            self.final = cid
        self.triggers.append((cid, now, is_final, len(self.triggers) + len(self.completions)))

    def _abort(self, cid: int, reason: AbortReason, expected: list) -> bool:
        """Returns True when the coordinator must raise."""
        p = self.pending.pop(cid)
        self.recent.append(cid)
        self.aborted.append((cid, reason))
        # every task hears of it: halted sources go on, loop heads drop its log, alignments end
        expected += [(t, NotifyCheckpointAborted(cid)) for t in self.tasks]
        self.failures += 1
        if self.failures > self.config.tolerable_failures:
            return True
        if p["final"]:
            self.final = None
            self._trigger(True, expected)
        return False

    def _complete(self, cid: int, expected: list) -> None:
        p = self.pending.pop(cid)
        self.recent.append(cid)
        self.completed.append(cid)
        self.failures = 0
        self.last_completion = self.h.clock.now()
        self.completions.append((self.last_completion, len(self.triggers) + len(self.completions)))
        for older in [o for o in self.pending if o < cid]:
            del self.pending[older]
            self.recent.append(older)
        expected += [(t, NotifyCheckpointComplete(cid, p["final"])) for t in self.tasks]

    def _call(self, fn, expected: list, must_raise: bool) -> Any:  # noqa: ANN001
        if must_raise:
            fn()
            assert len(self.h.failures) == 1, "the failure manager must be told, once"
            self.failed = True
            # the attempt is over: the coordinator aborted what was still pending
            self.aborted += [(cid, AbortReason.TASK_FAILED) for cid in self.pending]
            self.pending.clear()
            self.h.take_sent()
            return None
        result = fn()
        assert self.h.take_sent() == expected
        return result

    # -- rules --------------------------------------------------------------------------------
    @precondition(lambda self: not self.failed)
    @rule(dt=st.sampled_from([0.0, 0.5, 1.0, 2.0, 4.5]))
    def tick(self, dt: float) -> None:
        self.h.clock.advance(dt)
        now = self.h.clock.now()
        expected: list = []
        must_raise = False
        for cid in list(self.pending):
            if now - self.pending[cid]["at"] >= self.config.timeout:
                if self._abort(cid, AbortReason.EXPIRED, expected):
                    must_raise = True
                    break
        if (
            not must_raise
            and self.final is None
            and len(self.pending) < self.config.max_concurrent
            and now - self.last_trigger >= self.config.interval
            and now - self.last_completion >= self.config.min_pause
        ):
            self._trigger(False, expected)
        self._call(self.c.tick, expected, must_raise)

    @precondition(lambda self: not self.failed)
    @rule(task=st.integers(0, 3), choice=st.integers(0, 100))
    def acknowledge(self, task: int, choice: int) -> None:
        issued = list(range(1, self.next_id)) + [self.next_id + 3]  # every id so far, and a bogus one
        self._acknowledge(self.tasks[task % len(self.tasks)], issued[choice % len(issued)])

    @precondition(lambda self: not self.failed and self.pending)
    @rule(task=st.integers(0, 3), choice=st.integers(0, 100))
    def acknowledge_pending(self, task: int, choice: int) -> None:
        """Acks of checkpoints under way (most acks are), so that many of them complete."""
        cid = sorted(self.pending)[choice % len(self.pending)]
        waiting = [t for t in self.tasks if t not in self.pending[cid]["acked"]]
        self._acknowledge(waiting[task % len(waiting)], cid)

    def _acknowledge(self, task_id: TaskId, cid: int) -> None:
        expected: list = []
        if cid in self.pending:
            acked = self.pending[cid]["acked"]
            if task_id in acked:
                want = AckResult.DUPLICATE
            else:
                want = AckResult.ACCEPTED
                acked.add(task_id)
                if acked == set(self.tasks):
                    self._complete(cid, expected)
        elif cid in self.recent:
            want = AckResult.LATE
        else:
            want = AckResult.UNKNOWN_CHECKPOINT
        assert self._call(lambda: self.c.on_acknowledge(ack(task_id, cid)), expected, False) is want

    @precondition(lambda self: not self.failed and self.pending)
    @rule(task=st.integers(0, 3), choice=st.integers(0, 100))
    def decline(self, task: int, choice: int) -> None:
        if choice % 4:  # declines are rarer than acks, or few checkpoints would ever complete
            return
        task_id = self.tasks[task % len(self.tasks)]
        cid = sorted(self.pending)[choice % len(self.pending)]
        expected: list = []
        must_raise = self._abort(cid, AbortReason.DECLINED, expected)
        self._call(lambda: self.c.on_decline(DeclineCheckpoint(task_id, cid, "test")), expected, must_raise)

    @precondition(lambda self: not self.failed)
    @rule(task=st.integers(0, 3))
    def inputs_ended(self, task: int) -> None:
        task_id = self.tasks[task % len(self.tasks)]
        self.ended.add(task_id)
        expected: list = []
        for cid, p in self.pending.items():
            if task_id not in p["acked"] and task_id not in self.sources:
                done = self.completed[-1] if self.completed else 0
                expected.append((task_id, TriggerCheckpoint(cid, p["at"], p["final"], False, done)))
        if self.ended == set(self.tasks) and self.final is None:
            self._trigger(True, expected)
        self._call(lambda: self.c.on_inputs_ended(InputsEnded(task_id)), expected, False)

    @rule()
    def idle(self) -> None:
        """Nothing happens (the only rule left once the coordinator has failed the job)."""

    # -- invariants -----------------------------------------------------------------------------
    @invariant()
    def matches_the_model(self) -> None:
        assert list(self.c.pending) == list(self.pending)
        for cid, p in self.pending.items():
            assert self.c.pending[cid].awaiting == set(self.tasks) - p["acked"]
            assert self.c.pending[cid].is_final == p["final"]
        assert [c.checkpoint_id for c in self.c.completed] == self.completed
        assert [(a.checkpoint_id, a.reason) for a in self.c.aborted] == self.aborted

    @invariant()
    def completed_only_when_every_task_acknowledged(self) -> None:
        for done in self.c.completed:
            assert sorted(t.task for t in done.manifest.tasks) == sorted(str(t) for t in self.tasks)

    @invariant()
    def ids_increase(self) -> None:
        ids = [cid for cid, _, _, _ in self.triggers]
        assert ids == sorted(set(ids))
        done = [c.checkpoint_id for c in self.c.completed]
        assert done == sorted(set(done))

    @invariant()
    def concurrency_and_pacing(self) -> None:
        if self.failed:
            return
        assert sum(1 for p in self.c.pending.values() if not p.is_final) <= self.config.max_concurrent
        previous = 0.0
        for _, at, is_final, event in self.triggers:
            if not is_final:
                assert at - previous >= self.config.interval
                before = [t for t, e in self.completions if e < event]
                if before:
                    assert at - max(before) >= self.config.min_pause
            previous = at

    @invariant()
    def final_checkpoint_once_all_ended(self) -> None:
        if self.failed:
            return
        if self.ended == set(self.tasks):
            assert self.c.final_checkpoint is not None
            assert self.c.final_completed == any(self.pending_final_done())
        else:
            assert self.c.final_checkpoint is None

    def pending_final_done(self):  # noqa: ANN201
        final_ids = {cid for cid, _, is_final, _ in self.triggers if is_final}
        return [cid in final_ids for cid in self.completed]


TestCoordinatorMachine = CoordinatorMachine.TestCase
TestCoordinatorMachine.settings = settings(max_examples=200, stateful_step_count=40, deadline=None)


def test_retention_spares_the_base_of_a_checkpoint_still_in_flight(tmp_path):
    """A final checkpoint triggered while a periodic one is pending was based on the checkpoint
    before: completing the periodic one must not let retention drop that base."""
    storage = CheckpointStorage(str(tmp_path))
    h = Harness(CheckpointConfig(interval=1.0, directory=str(tmp_path), retain=1, timeout=10.0), storage)
    h.at(1.0)
    h.ack_all(1)
    h.at(2.0)  # checkpoint 2 pending, based on 1
    for task in h.sources:
        h.coordinator.on_inputs_ended(InputsEnded(task))
    final = h.coordinator.trigger(is_final=True)  # based on 1 as well
    assert h.coordinator.pending[final].based_on == 1
    h.ack_all(2)
    assert storage.complete_checkpoints() == [1, 2]  # 1 stays while the final one is in flight
    h.ack_all(final)
    assert storage.complete_checkpoints() == [final]


# -- checkpoints that move key groups (`runtime.master.migrations`) -----------------------------------------
def test_a_rerouting_checkpoint_holds_periodic_and_final_checkpoints_until_the_groups_moved() -> None:
    h = Harness(CheckpointConfig(interval=1.0, directory="unused", timeout=100.0))
    table = RoutingTable.contiguous(2, 128).moved({0: 1})
    moving = h.coordinator.trigger(reroute=table)
    sent = h.take_sent()
    assert sent and all(m.reroute == table for _, m in sent)  # the sources' barriers carry the table
    h.ack_all(moving)
    h.at(5.0)  # periodic checkpoints wait for the new owners
    assert not h.coordinator.pending
    for task in h.tasks:
        h.coordinator.on_inputs_ended(InputsEnded(task))
    assert h.coordinator.final_checkpoint is None  # a new owner would snapshot without its groups
    h.coordinator.migrated()
    final = h.coordinator.final_checkpoint
    assert final is not None and h.coordinator.pending[final].routing == table


def test_an_aborted_rerouting_checkpoint_fails_the_attempt() -> None:
    h = Harness(CheckpointConfig(interval=1.0, directory="unused", timeout=2.0, tolerable_failures=10))
    moving = h.coordinator.trigger(reroute=RoutingTable.contiguous(2, 128).moved({0: 1}))
    h.coordinator.on_decline(DeclineCheckpoint(h.tasks[0], moving, "no room"))
    assert h.coordinator.is_stopped and len(h.failures) == 1  # its tasks switched: only a restore undoes it
    assert "moved key groups" in str(h.failures[0])
