"""Hosts step a runnable task a few times in a row, so queues can form and be joined."""

from __future__ import annotations

import time

from epochal.cluster import worker as worker_module
from epochal.cluster.worker import Worker
from epochal.runtime.task.setup import STEPS_IN_A_ROW
from epochal.runtime.task.step_times import StepTimes
from epochal.runtime.task.task import Task


class _Task:
    def __init__(self, name: str, work: int, log: list[str], seconds: float = 0.0) -> None:
        self.name, self.work, self.log, self.seconds = name, work, log, seconds
        self.times = StepTimes()

    def is_runnable(self) -> bool:
        return self.work > 0

    def step(self) -> None:
        time.sleep(self.seconds)
        self.work -= 1
        self.log.append(self.name)
        self.times.ran_until = time.perf_counter()

    run_steps = Task.run_steps


class _NoBackground:
    def run_done(self) -> None:
        pass


def _worker(tasks: list[_Task]) -> Worker:
    worker = Worker.__new__(Worker)  # only the stepping loop is exercised: no sockets
    worker.background = _NoBackground()  # type: ignore[assignment]
    worker.failed = False
    worker.tasks = {t.name: t for t in tasks}
    return worker


def test_a_runnable_task_takes_a_burst_of_steps_then_yields_its_turn(monkeypatch) -> None:
    monkeypatch.setattr(worker_module, "_TIME_SLICE", 60.0)  # a loaded machine must not end the slice early
    log: list[str] = []
    busy = _worker([_Task("source", 6, log), _Task("count", 3, log)])._step_tasks()
    burst = STEPS_IN_A_ROW
    assert busy and 1 < burst < 6
    assert log == ["source"] * burst + ["count"] * 3 + ["source"] * (6 - burst)


def test_nothing_runnable_is_not_busy() -> None:
    assert not _worker([_Task("idle", 0, [])])._step_tasks()


def test_run_steps_stops_when_the_task_is_no_longer_runnable() -> None:
    log: list[str] = []
    task = _Task("t", 2, log)
    assert task.run_steps(5) == 2 and log == ["t", "t"]
    assert task.run_steps(5) == 0
    task.work = 9
    assert task.run_steps(3) == 3 and task.work == 6


def test_slow_steps_are_not_taken_in_a_row_past_the_time_slice() -> None:
    """A step longer than the slice ends the burst: the worker goes back to its sockets (where a
    restart or a checkpoint trigger waits) after one step, not four (in-place recovery took
    0.56 s instead of 0.13 s with a paced UDF before this)."""
    log: list[str] = []
    _worker([_Task("slow", 6, log, seconds=0.01)])._step_tasks()
    assert log == ["slow"]
