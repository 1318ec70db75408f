"""Running a job on a host to its end, relaunched at another parallelism when a rescale asks.

A rescale moves key groups live onto standby subtasks where it can (`runtime.master.migrations`);
otherwise the job master takes a checkpoint and ends the host's run with `RescaleByRestore`
(the Spark host first tries to restart its tasks in the running stage). Then the job is compiled
anew at the new parallelism, from its `JobBlueprint`, and launched again from that checkpoint
(rescaling by restore, dissertation §4.2), with room for the next rescale to be live.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from ..plan.blueprint import JobBlueprint
from ..plan.job_graph import JobGraph
from ..runtime.master.command_desk import RescaleByRestore
from ..runtime.master.control import JobControl, JobState
from ..runtime.result import JobResult


class Host(Protocol):
    """Where a job's tasks run: this process, or a Spark barrier stage."""

    def execute(self, job: JobGraph, from_checkpoint: str | int | None = None, control: JobControl | None = None,
                recompile: Callable[[int], JobGraph] | None = None) -> JobResult: ...


def run_job(host: Callable[[], Host], blueprint: JobBlueprint, job: JobGraph, from_checkpoint: str | int | None,
            control: JobControl) -> JobResult:
    """Run `job` (compiled from `blueprint`) on a new `host()` until it ends; a rescale by
    restore relaunches it. A job that cannot start, or fails, is published `FAILED`.

    Raises:
        JobFailedError, JobCancelledError, and what the job master's start checks raise.
    """
    current, restore, workers = job, from_checkpoint, job.config.max_workers
    try:
        while True:
            def recompile(parallelism: int, launched: int | None = workers) -> JobGraph:
                return blueprint.compile(parallelism, launched)

            try:
                return host().execute(current, restore, control, recompile=recompile)
            except RescaleByRestore as rescale:  # beyond the stage's workers: relaunch, with headroom
                workers = headroom(control.status().parallelism, rescale.parallelism, workers, control.task_slots)
                current = blueprint.compile(rescale.parallelism, workers)
                restore = rescale.checkpoint_id
                rescale.done(control, current.parallelism)
    except BaseException as exc:
        if not control.status().state.is_final:  # refused at start, or an error of ours: say which
            control.publish(state=JobState.FAILED, failures=(f"{type(exc).__name__}: {exc}",))
        raise


def headroom(current: int, parallelism: int, max_workers: int | None, slots: int | None) -> int | None:
    """The workers (`max_workers`) a rescale to `parallelism` beyond the running stage's launches
    with: room for one more step as large as this one (2 -> 4 launches 6), so the next rescale is
    live, within the cluster's task slots (unknown: no more than asked for)."""
    wanted = parallelism + max(0, parallelism - current)
    if slots is None:
        wanted = parallelism
    return max(min(wanted, slots or wanted), parallelism, max_workers or 0)
