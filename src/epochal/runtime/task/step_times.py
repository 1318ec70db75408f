"""Where a task's time goes: busy stepping, held back by a full output, or idle.

A clock read at each end of a step (one batch at most), never per record: the step is busy
time; the wait since the previous step is backpressure when that one left an output channel
full, else idle time. The live metrics read the totals (`runtime.metrics.TaskMetrics`).
"""

from __future__ import annotations

import time


class StepTimes:
    """A task's busy and backpressured seconds since it opened."""

    def __init__(self) -> None:
        self.busy_s = 0.0
        self.backpressured_s = 0.0
        self.opened_at = self.ran_until = time.perf_counter()
        self.output_full = False  # the last step ended on a full output: the wait since is backpressure

    def open(self) -> None:
        self.opened_at = self.ran_until = time.perf_counter()

    def started(self) -> float:
        """A step starts; returns its start time."""
        started = time.perf_counter()
        if self.output_full:
            self.backpressured_s += started - self.ran_until
        return started

    def ended(self, started: float, output_full: bool) -> None:
        self.ran_until = ended = time.perf_counter()
        self.busy_s += ended - started
        self.output_full = output_full

    def held_s(self, now: float) -> float:
        """Backpressured seconds, counting the wait under way."""
        return self.backpressured_s + (now - self.ran_until if self.output_full else 0.0)
