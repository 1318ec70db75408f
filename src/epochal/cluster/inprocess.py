"""The in-process executor: a whole job in one Python process, for tests and debugging.

Every task of the job graph lives here, connected by `LocalChannel`s. One scheduler loop picks a
runnable task, or a pending background snapshot write, with a seeded random generator, so two
runs with the same seed and a virtual clock interleave identically: a failing interleaving found
by a randomized test replays exactly. With the wall clock (the default) timing is real but the
order of steps is still drawn from the seed. A picked task takes a few steps in a row
(`Task.run_steps`), as on a Spark worker, so backlogs form and get joined.

Failure handling is the job manager's (dissertation §4.1.3.1, rollback, L3156–3185): any error
stops every task, pending checkpoints are aborted, and the job restarts from its latest complete
checkpoint until the restart budget is spent.
"""

from __future__ import annotations

import logging
import random
import time
from dataclasses import dataclass
from typing import Any, Callable

from ..errors import EpochalError, JobFailedError, NoCheckpointError
from ..plan.job_graph import JobGraph, TaskId
from ..runtime.clock import Clock, VirtualClock, WallClock
from ..runtime.coordinator import AbortReason
from ..runtime.generation import Generation
from ..runtime.result import CheckpointSummary, JobProgress, JobResult, merge_metrics, progress_of
from ..runtime.task import STEPS_IN_A_ROW, Task
from ..runtime.wiring import build_tasks, local_channels
from ..state.storage import CheckpointStorage, Manifest
from .gc_tuning import tuned_gc

log = logging.getLogger(__name__)


class _DeferredRunner:
    """Background work as schedulable units, so its completion order follows the seed too."""

    def __init__(self) -> None:
        self.pending: list[Callable[[], None]] = []

    def submit(self, fn: Callable[[], None]) -> None:
        self.pending.append(fn)


@dataclass(slots=True)
class _Attempt:
    """One run of the job graph: its tasks (wired by local channels) and its generation."""

    tasks: dict[TaskId, Task]
    generation: Generation
    background: _DeferredRunner
    outbox: list[Any]


class InProcessExecutor:
    """Runs a job graph in this process.

    Args:
        seed: seeds the choice of the next task to step; same seed, same interleaving.
        virtual_time: use a virtual clock that advances `step_time` per step, so timing
            (checkpoint intervals, timers) is part of the replayable run too.
        step_time: virtual seconds per scheduler step.
    """

    def __init__(
        self,
        seed: int = 0,
        virtual_time: bool = False,
        step_time: float = 0.001,
        progress: Callable[[JobProgress], None] | None = None,
    ) -> None:
        self.seed = seed
        self.virtual_time = virtual_time
        self.step_time = step_time
        self.progress = progress
        self._restarts = 0
        self._attempt_checkpoints: list[Any] = []

    def execute(self, job: JobGraph, from_checkpoint: str | int | None = None) -> JobResult:
        with tuned_gc(job.config.gc_threshold):
            return self._execute(job, from_checkpoint)

    def _execute(self, job: JobGraph, from_checkpoint: str | int | None) -> JobResult:
        config = job.config
        storage = CheckpointStorage(config.checkpoint.directory) if config.checkpoint.directory else None
        clock: Clock = VirtualClock() if self.virtual_time else WallClock()
        rng = random.Random(self.seed)

        manifest: Manifest | None = None
        if from_checkpoint is not None:
            if storage is None:
                raise NoCheckpointError("from_checkpoint needs CheckpointConfig(directory=...)")
            manifest = storage.resolve(from_checkpoint)

        restarts = 0
        failures: list[str] = []
        restored_from: list[int | None] = []
        checkpoints: list[CheckpointSummary] = []
        while True:
            restored_from.append(manifest.checkpoint_id if manifest is not None else None)
            next_id = max(storage.checkpoint_ids(), default=0) + 1 if storage else 1
            try:
                attempt = self._start(job, clock, storage, manifest, next_id)
                self._run(attempt, clock, rng)
            except Exception as exc:  # any failure of the attempt: roll back (L3156)
                checkpoints.extend(CheckpointSummary.of(c.manifest) for c in self._attempt_checkpoints)
                failures.append(f"{type(exc).__name__}: {exc}")
                log.warning("job %r failed (attempt %d): %s", job.name, restarts + 1, exc)
                if restarts >= config.restart.max_restarts:
                    raise JobFailedError(job.name, restarts + 1, exc) from exc
                restarts += 1
                self._restarts = restarts
                self._sleep(clock, config.restart.delay)
                manifest = storage.latest() if storage is not None else None
                continue
            checkpoints.extend(CheckpointSummary.of(c.manifest) for c in attempt.generation.coordinator.completed)
            return JobResult(
                job.name,
                restarts,
                tuple(checkpoints),
                merge_metrics([m.metrics for m in attempt.generation.finished.values()]),
                tuple(failures),
                tuple(restored_from),
            )

    def _sleep(self, clock: Clock, seconds: float) -> None:
        if isinstance(clock, VirtualClock):
            clock.advance(seconds)
        elif seconds > 0:
            time.sleep(seconds)

    def _start(
        self,
        job: JobGraph,
        clock: Clock,
        storage: CheckpointStorage | None,
        manifest: Manifest | None,
        first_checkpoint_id: int,
    ) -> _Attempt:
        outbox: list[Any] = []
        background = _DeferredRunner()
        tasks = build_tasks(
            job, job.task_ids(), local_channels(job), clock, storage, manifest, outbox.append, background
        )

        def send(task_id: TaskId, message: Any) -> None:
            tasks[task_id].inbox.append(message)

        generation = Generation(job, storage, clock, send, first_checkpoint_id)
        self._attempt_checkpoints = generation.coordinator.completed  # kept when the attempt fails
        attempt = _Attempt(tasks, generation, background, outbox)
        try:
            for task in tasks.values():
                task.open()
        except Exception:
            for task in tasks.values():
                task.close()
            raise
        return attempt

    def _run(self, attempt: _Attempt, clock: Clock, rng: random.Random) -> None:
        tasks = list(attempt.tasks.values())
        coordinator = attempt.generation.coordinator
        background = attempt.background
        outbox = attempt.outbox
        virtual = clock if isinstance(clock, VirtualClock) else None
        last_progress = time.monotonic()
        try:
            while not attempt.generation.is_finished:
                if self.progress is not None and time.monotonic() - last_progress >= 0.5:
                    last_progress = time.monotonic()
                    self._report(attempt)
                coordinator.tick()
                runnable: list[Any] = [t for t in tasks if t.is_runnable()]
                n_tasks = len(runnable)
                runnable.extend(background.pending)
                if not runnable:
                    self._idle(attempt, clock, virtual)
                    continue
                pick = rng.randrange(len(runnable))
                if pick < n_tasks:
                    steps = runnable[pick].run_steps()
                else:  # as many background writes as a task's steps, so writes keep pace
                    pending = background.pending
                    pending.remove(runnable[pick])
                    runnable[pick]()
                    steps = 1
                    while steps < STEPS_IN_A_ROW and pending:
                        pending.pop(rng.randrange(len(pending)))()
                        steps += 1
                self._deliver(outbox, attempt)
                if virtual is not None:
                    virtual.advance(self.step_time * steps)
        except BaseException:
            coordinator.stop(AbortReason.TASK_FAILED)
            for task in tasks:
                task.close()
            raise

    def _report(self, attempt: _Attempt) -> None:
        assert self.progress is not None
        metrics = merge_metrics([t.metrics() for t in attempt.tasks.values()])
        coordinator = attempt.generation.coordinator
        done = [CheckpointSummary.of(c.manifest) for c in coordinator.completed]
        self.progress(progress_of(coordinator.job, metrics, done, self._restarts))

    def _deliver(self, outbox: list[Any], attempt: _Attempt) -> None:
        while outbox:
            attempt.generation.deliver(outbox.pop(0))

    def _idle(self, attempt: _Attempt, clock: Clock, virtual: VirtualClock | None) -> None:
        """Nothing can run now: wait for the next timer or checkpoint deadline."""
        deadlines = [t for task in attempt.tasks.values() if (t := task.next_timer()) is not None]
        if (d := attempt.generation.coordinator.next_deadline()) is not None:
            deadlines.append(d)
        if not deadlines:
            stuck = [t.name for t in attempt.tasks.values() if t.id not in attempt.generation.finished]
            raise EpochalError(f"job is stuck: no task can run and nothing is scheduled ({stuck})")
        wait = max(0.0, min(deadlines) - clock.now())
        if virtual is not None:
            virtual.advance(max(wait, self.step_time))
        else:
            time.sleep(min(max(wait, 0.0005), 0.05))
