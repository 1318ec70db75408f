"""The in-process executor: a whole job in one Python process, for tests and debugging.

Every task of the job graph lives here, connected by `LocalChannel`s. One scheduler loop picks a
runnable task, or a pending background snapshot write, with a seeded random generator, so two
runs with the same seed and a virtual clock interleave identically: a failing interleaving found
by a randomized test replays exactly. With the wall clock (the default) timing is real but the
order of steps is still drawn from the seed. A picked task takes a few steps in a row
(`Task.run_steps`), as on a Spark worker, so backlogs form and get joined. Only tasks that
something happened to are drawn from (`ready_tasks`): the cost of a step does not grow with the
number of tasks.

Failures are the job master's (`runtime.master.job_master`): any error fails the attempt, and the job
master decides whether and from which checkpoint the next one starts.
"""

from __future__ import annotations

import logging
import math
import random
import time
from collections import deque
from collections.abc import Callable
from typing import Any, TypeVar

from ..errors import EpochalError, JobCancelledError
from ..plan.job_graph import JobGraph, TaskId
from ..runtime import aio
from ..runtime.clock import Clock, VirtualClock, WallClock
from ..runtime.gc_tuning import tuned_gc
from ..runtime.master.attempt import Attempt
from ..runtime.master.command_desk import RescaleByRestore
from ..runtime.master.control import JobControl
from ..runtime.master.job_master import JobMaster
from ..runtime.metrics import TaskMetrics
from ..runtime.result import JobProgress, JobResult
from ..runtime.task.setup import STEPS_IN_A_ROW
from ..runtime.task.task import Task
from ..runtime.task.wiring import build_tasks, local_channels, merger_for
from .ready_tasks import ReadyTasks

log = logging.getLogger(__name__)


R = TypeVar("R")


class _DeferredRunner:
    """Background work as schedulable units, so its completion order follows the seed too.

    Everything runs on the one thread, so a unit hands its result on at once.
    """

    def __init__(self) -> None:
        self.pending: list[Callable[[], None]] = []

    def submit(self, work: Callable[[], R], on_done: Callable[[R], None]) -> None:
        self.pending.append(lambda: on_done(work()))

    read_ahead = submit


class InProcessExecutor:
    """Runs a job graph in this process.

    Args:
        seed: seeds the choice of the next task to step; same seed, same interleaving.
        virtual_time: use a virtual clock that advances `step_time` per step, so timing
            (checkpoint intervals, timers) is part of the replayable run too.
        step_time: virtual seconds per scheduler step.
        progress: called with a live view of the job about twice a second.
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

    def execute(
        self, job: JobGraph, from_checkpoint: str | int | None = None, control: JobControl | None = None,
        recompile: Callable[[int], JobGraph] | None = None,
    ) -> JobResult:
        """Run `job` to its end (`recompile` is for hosts that rescale in place; here a rescale
        rebuilds every task anyway, so it leaves by `RescaleByRestore`)."""
        with tuned_gc(job.config.gc_threshold):
            clock: Clock = VirtualClock() if self.virtual_time else WallClock()
            master = JobMaster(job, clock, from_checkpoint, self.progress, control)
            master.control.task_slots = job.max_parallelism  # one process: no task slots to run out of
            rng = random.Random(self.seed)
            while True:
                try:
                    self._run_attempt(master, clock, rng)
                except (JobCancelledError, RescaleByRestore):  # the job's controllers asked: not a failure
                    raise
                except Exception as exc:  # any failure of the attempt: the job master decides
                    master.on_failure(exc)  # raises JobFailedError once the budget is spent
                    continue
                return master.result()

    def _run_attempt(self, master: JobMaster, clock: Clock, rng: random.Random) -> None:
        job = master.job
        tasks: dict[TaskId, Task] = {}

        def send(task_id: TaskId, message: Any) -> None:
            task = tasks[task_id]
            task.inbox.append(message)
            task.wake()

        attempt = master.start_attempt(send)
        outbox: deque[Any] = deque()
        background = _DeferredRunner()
        merger = merger_for(job, master.storage, background, "inprocess")  # one file per checkpoint
        tasks.update(
            build_tasks(
                job, job.task_ids(), local_channels(job), clock, master.storage, master.restore_from,
                outbox.append, background, merger,
            )
        )
        try:
            for task in tasks.values():
                task.open()
            self._loop(master, attempt, list(tasks.values()), background, outbox, clock, rng)
        except BaseException:
            for task in tasks.values():
                task.close()
            if merger is not None:
                merger.close()
            raise

    def _loop(
        self,
        master: JobMaster,
        attempt: Attempt,
        tasks: list[Task],
        background: _DeferredRunner,
        outbox: deque[Any],
        clock: Clock,
        rng: random.Random,
    ) -> None:
        coordinator = attempt.coordinator
        virtual = clock if isinstance(clock, VirtualClock) else None
        ready = ReadyTasks(tasks)
        woken, pending = ready.woken, background.pending

        def metrics() -> list[TaskMetrics]:  # read by the job master twice a second
            return [t.task_metrics() for t in tasks]

        while not attempt.is_finished:
            if attempt.failure is not None:
                raise attempt.failure
            if (driver := aio.active_driver()) is not None:  # async I/O's results (`runtime.aio`)
                driver.pump()
            master.report_progress(metrics)
            master.poll_control()
            coordinator.tick()
            ready.due(clock.now())
            if ready.counted_draw():
                ready.rescan()
            steps = 0
            while (n := len(woken) + len(pending)) or ready.rescan():  # a uniform draw among the runnable
                if not n:
                    continue
                pick = rng.randrange(n)
                if pick >= len(woken):  # as many background writes as a task's steps, so writes keep pace
                    pending.pop(pick - len(woken))()
                    steps = 1
                    while steps < STEPS_IN_A_ROW and pending:
                        pending.pop(rng.randrange(len(pending)))()
                        steps += 1
                    break
                task = woken[pick]
                if task.is_runnable():
                    steps = task.run_steps()
                    ready.stepped(task, steps == STEPS_IN_A_ROW)
                    break
                ready.drop(task)
            if not steps:
                self._idle(attempt, tasks, clock, virtual)
                continue
            while outbox:
                attempt.deliver(outbox.popleft())
            if virtual is not None:
                virtual.advance(self.step_time * steps)
        master.report_progress(metrics, now=True)  # the tasks' times as they finished

    def _idle(self, attempt: Attempt, tasks: list[Task], clock: Clock, virtual: VirtualClock | None) -> None:
        """Nothing can run now: wait for the next timer or checkpoint deadline."""
        deadlines = [t for task in tasks if (t := task.next_timer()) is not None]
        if (d := attempt.coordinator.next_deadline()) is not None:
            deadlines.append(d)
        driver = aio.active_driver()
        if driver is not None:  # async requests in flight: wait for their sockets and timers
            if virtual is None:
                driver.wait(min(max(min(deadlines, default=math.inf) - clock.now(), 0.0), 0.05))
            else:  # real time must pass for the requests; virtual time goes on a step
                driver.wait(0.001)
                virtual.advance(self.step_time)
            return
        if not deadlines:
            stuck = [t.name for t in tasks if t.id not in attempt.finished]
            raise EpochalError(f"job is stuck: no task can run and nothing is scheduled ({stuck})")
        wait = max(0.0, min(deadlines) - clock.now())
        if virtual is not None:
            virtual.advance(max(wait, self.step_time))
        else:
            time.sleep(min(max(wait, 0.0005), 0.05))
