"""`CommandDesk` alone, on fakes of the attempt and the migrations: each command kind to its
handler, and whatever waits for a checkpoint finished, failed or abandoned, never left waiting."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from epochal import StreamEnvironment
from epochal.errors import CheckpointError, EpochalError
from epochal.runtime.checkpoints import AbortedCheckpoint, AbortReason
from epochal.runtime.commands import Move, Query, Rescale, Savepoint
from epochal.runtime.master.command_desk import CommandDesk, RescaleByRestore
from epochal.runtime.master.control import JobControl, JobState
from epochal.testing import CollectSink, ListSource


class _Coordinator:
    def __init__(self) -> None:
        self.triggered: list[int] = []
        self.completed: list[Any] = []
        self.is_stopped = False
        self.final_checkpoint = None
        self.routing = None

    def trigger(self, aligned: bool = False) -> int:
        assert aligned  # a savepoint's or a rescale's checkpoint restores at any parallelism
        self.triggered.append(len(self.triggered) + 10)
        return self.triggered[-1]


class _Migrations:
    busy = False

    def __init__(self, live: bool = False) -> None:
        self.live, self.moved, self.abandoned = live, [], []

    def move(self, ticket: Any, coordinator: Any) -> None:
        self.moved.append(ticket.command)

    def rescale(self, ticket: Any, coordinator: Any, parallelism: int) -> bool:
        return self.live

    def abandon(self, why: str) -> None:
        self.abandoned.append(why)


def _desk(tmp_path: Path, *, live: bool = False, slots: int | None = None, storage: Any = True):  # noqa: ANN202
    env = StreamEnvironment(parallelism=2, executor="inprocess", max_parallelism=16)
    env.from_source(ListSource([1])).key_by(lambda x: x).count().sink_to(CollectSink())
    job = env.job_graph("desk")
    control = JobControl(job.name, 2)
    control.publish(state=JobState.RUNNING)
    control.task_slots = slots
    desk = CommandDesk(job, control, SimpleNamespace() if storage else None, _Migrations(live))  # type: ignore[arg-type]
    coordinator = _Coordinator()
    desk.attempt_started(SimpleNamespace(coordinator=coordinator, send=lambda task, message: None))  # type: ignore[arg-type]
    return desk, control, coordinator


def _completed(checkpoint_id: int) -> Any:
    return SimpleNamespace(checkpoint_id=checkpoint_id, manifest=None)


def test_a_rescale_beyond_the_task_slots_or_max_parallelism_is_refused_before_any_checkpoint(tmp_path: Path) -> None:
    desk, control, coordinator = _desk(tmp_path, slots=3)
    beyond_slots, beyond_max = control.submit(Rescale(4)), control.submit(Rescale(17))
    desk.poll()
    desk.poll()
    with pytest.raises(EpochalError, match="needs 4 task slots; the cluster has 3"):
        beyond_slots.wait(0)
    with pytest.raises(ValueError, match=r"at most max_parallelism \(16\)"):
        beyond_max.wait(0)
    assert coordinator.triggered == []


def test_a_rescale_to_where_the_job_runs_changes_nothing(tmp_path: Path) -> None:
    desk, control, coordinator = _desk(tmp_path)
    coordinator.completed.append(_completed(7))
    ticket = control.submit(Rescale(2))
    desk.poll()
    assert ticket.wait(0) == 7 and coordinator.triggered == []


def test_a_rescale_that_cannot_move_live_relaunches_from_its_checkpoint(tmp_path: Path) -> None:
    desk, control, coordinator = _desk(tmp_path)
    ticket = control.submit(Rescale(3))
    desk.poll()
    (checkpoint,) = coordinator.triggered
    assert not ticket.is_done
    desk.checkpoint_completed(_completed(checkpoint))
    with pytest.raises(RescaleByRestore) as relaunch:
        desk.poll()
    assert (relaunch.value.checkpoint_id, relaunch.value.parallelism) == (checkpoint, 3)
    assert control.status().state is JobState.RESTARTING and not ticket.is_done
    relaunch.value.done(control, 3)  # the launcher restored it at 3
    assert ticket.wait(0) == checkpoint and control.status().parallelism == 3


def test_a_live_rescale_is_the_migrations_and_triggers_nothing_here(tmp_path: Path) -> None:
    desk, control, coordinator = _desk(tmp_path, live=True)
    control.submit(Rescale(1))
    desk.poll()
    assert coordinator.triggered == []


def test_a_move_or_a_rescale_while_a_savepoint_waits_is_refused_at_once(tmp_path: Path) -> None:
    desk, control, coordinator = _desk(tmp_path)
    savepoint = control.submit(Savepoint(str(tmp_path / "sp")))
    move, rescale = control.submit(Move.of({0: 1})), control.submit(Rescale(3))
    for _ in range(3):
        desk.poll()
    for refused in (move, rescale):
        with pytest.raises(EpochalError, match="a savepoint is under way"):
            refused.wait(0)
    assert not savepoint.is_done and desk.migrations.moved == []  # type: ignore[attr-defined]


def test_a_move_goes_to_the_migrations(tmp_path: Path) -> None:
    desk, control, _ = _desk(tmp_path)
    control.submit(Move.of({3: 1, 0: 1}, batch=1))
    desk.poll()
    assert desk.migrations.moved == [Move(((0, 1), (3, 1)), 1)]  # type: ignore[attr-defined]


def test_a_subsumed_or_aborted_checkpoint_fails_what_waited_for_it(tmp_path: Path) -> None:
    desk, control, coordinator = _desk(tmp_path)
    first = control.submit(Savepoint(str(tmp_path / "a")))
    desk.poll()
    desk.checkpoint_completed(_completed(coordinator.triggered[0] + 1))  # a newer one completed first
    with pytest.raises(CheckpointError, match="subsumed"):
        first.wait(0)
    second = control.submit(Savepoint(str(tmp_path / "b")))
    desk.poll()
    desk.checkpoint_aborted(AbortedCheckpoint(coordinator.triggered[-1], AbortReason.EXPIRED, "slow"))
    with pytest.raises(CheckpointError, match="aborted: expired \\(slow\\)"):
        second.wait(0)


def test_stopping_abandons_everything_that_waits_with_the_reason(tmp_path: Path) -> None:
    desk, control, _ = _desk(tmp_path)
    savepoint = control.submit(Savepoint(str(tmp_path / "sp")))
    desk.poll()
    desk.stop("a worker died")
    with pytest.raises(EpochalError, match="savepoint abandoned: a worker died"):
        savepoint.wait(0)
    assert desk.migrations.abandoned == ["a worker died"]  # type: ignore[attr-defined]


def test_what_needs_a_checkpoint_is_refused_without_storage(tmp_path: Path) -> None:
    desk, control, _ = _desk(tmp_path, storage=False)
    ticket = control.submit(Savepoint(str(tmp_path / "sp")))
    desk.poll()
    with pytest.raises(EpochalError, match="needs CheckpointConfig"):
        ticket.wait(0)


def test_commands_are_checked_where_they_are_made() -> None:
    for bad in (lambda: Rescale(0), lambda: Rescale(True), lambda: Move(()), lambda: Move(((0, 1), (0, 2))),
                lambda: Move(((-1, 0),)), lambda: Move(((0, 1),), batch=0), lambda: Savepoint(" "),
                lambda: Query("", 1)):
        with pytest.raises(ValueError):
            bad()
