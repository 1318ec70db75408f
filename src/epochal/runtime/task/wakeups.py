"""Telling a task's host that the task may have something to do.

A host that steps many tasks on one thread (the in-process executor hosts every task of a job:
512 at parallelism 128) cannot afford to ask each whether it can run before every step. A task
instead says when that may have changed, through its `wake` hook: an element arrived on an input
(`InputGate`), a full output has room again (`OutputGate`), a background write or read-ahead
handed its result back (`WakingRunner`). Control messages and timers a host knows of itself.
A wake-up is a hint: the host still asks `Task.is_runnable` before stepping the task, so a
spurious one costs a check, and only a missed one would cost time (hosts rescan when idle).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from .checkpointer import BackgroundRunner

R = TypeVar("R")


def no_wake() -> None:
    """The hook of a task whose host steps every task in turn anyway (a Spark worker)."""


class WakingRunner:
    """A task's view of its host's background runner: each result handed back wakes the task."""

    def __init__(self, runner: BackgroundRunner, wake: Callable[[], None]) -> None:
        self._runner = runner
        self._wake = wake

    def _waking(self, on_done: Callable[[R], None]) -> Callable[[R], None]:
        def done(result: R) -> None:
            try:
                on_done(result)
            finally:
                self._wake()

        return done

    def submit(self, work: Callable[[], R], on_done: Callable[[R], None]) -> None:
        self._runner.submit(work, self._waking(on_done))

    def read_ahead(self, work: Callable[[], R], on_done: Callable[[R], None]) -> None:
        self._runner.read_ahead(work, self._waking(on_done))
