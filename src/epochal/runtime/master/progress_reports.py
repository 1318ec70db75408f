"""What the job master tells of a running job: live metrics, progress, and the run's history.

A metrics snapshot is O(tasks), so snapshots are spaced: at most two per `metrics_interval`,
and never closer than their own cost allows (`METRICS_SHARE` of the job master's time). Each is
published into the `JobControl` (the endpoint, the dashboard, `/metrics`) and shown to the
progress display as the whole job's counts (`progress_view`, `job_counts`). The completed
checkpoints' summaries are kept here, in order: the display's and the `JobResult`'s. The run's
history file (`history`) is rewritten when an attempt fails, when the job ends, and at most
every few seconds as checkpoints complete.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable

from ...plan.job_graph import JobGraph
from ...state.manifest import Manifest
from ...state.storage import CheckpointStorage
from ..metrics import METRICS_SHARE, JobMetrics, TaskMetrics
from ..result import CheckpointSummary, JobProgress
from ..wire.messages import OperatorMetrics
from .attempt_counts import AttemptCounts
from .control import JobControl, JobState
from .history import JobHistory
from .metrics_collector import MetricsCollector
from .progress_view import progress_view


class ProgressReports:
    """The job's live metrics, progress and history, as the job master reports them.

    Args:
        display: called with a live view of the job, at most twice per `metrics_interval`.
        counts: what the attempt's counts go on from (the progress counts the whole job).
        restarts: how many times the job restarted so far.
    """

    def __init__(
        self, job: JobGraph, control: JobControl, metrics: MetricsCollector, counts: AttemptCounts,
        storage: CheckpointStorage | None, display: Callable[[JobProgress], None] | None,
        restarts: Callable[[], int],
    ) -> None:
        self.job = job
        self.control = control
        self.metrics = metrics
        self.counts = counts
        self.display = display
        self.restarts = restarts
        self.checkpoints: list[CheckpointSummary] = []  # the completed ones, in order
        self.history = JobHistory.of(control, storage)  # kept in the checkpoint directory
        self._last = float("-inf")
        self._cost = 0.0  # seconds the last metrics snapshot took
        every = job.config.metrics_interval
        self._interval = math.inf if every is None else every / 2  # progress and metrics snapshots

    def checkpoint_completed(self, manifest: Manifest) -> None:
        self.checkpoints.append(CheckpointSummary.of(manifest))

    def report(self, tasks: Callable[[], Iterable[TaskMetrics]], attempt: int, now: bool = False) -> None:
        """Publish a metrics snapshot and report live progress if it is time (or `now`); `tasks`
        (the latest metrics of the attempt's tasks) is only called then."""
        at = time.monotonic()
        # a snapshot is O(tasks): spaced so that it takes at most METRICS_SHARE of the job master's time
        spacing = max(self._interval, self._cost / METRICS_SHARE)
        if not now and (at - self._last < spacing or self._interval == math.inf):
            return
        self._last = at
        metrics = self.metrics.snapshot(tasks(), attempt)
        self._cost = time.monotonic() - at
        self.control.publish_metrics(metrics)
        self._tell(metrics)

    def _tell(self, metrics: JobMetrics, state: JobState | None = None) -> None:
        """Tell the progress display (the whole job's counts, `progress_view`); `state` for the
        last report, as the job ends: a display's last frame is the end, not a second before it."""
        if self.display is not None:
            self.display(progress_view(self.job, metrics, self.counts.base, self.checkpoints, self.restarts(),
                                       (state or self.control.status().state).value, self.control.web_url))

    def final(self, state: JobState) -> None:
        """The last report, as the job ends in `state`."""
        metrics = self.control.metrics()
        if metrics is not None:
            self._tell(metrics, state)

    def archive(self, summary: str | None = None, often: bool = False,
                operators: tuple[OperatorMetrics, ...] = ()) -> None:
        """Keep the job's status and metrics in its history (`history`), if it has a directory."""
        if self.history is not None:
            self.history.record(self.control, summary, often=often, operators=operators)
