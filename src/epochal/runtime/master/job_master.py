"""The job master: what every host does to run a job, whatever moves its bytes.

One job master serves both hosts (the in-process executor and the Spark barrier stage). It
runs the checks before the first attempt (`start_checks`: sources, sinks, a fresh start over an
earlier run's checkpoints), which a host runs before it starts Spark; resolves `from_checkpoint`
(a savepoint is adopted into the job's own storage, so every host restores by checkpoint id);
numbers the attempts and the checkpoint ids they continue from; and keeps the checkpoint
history, live progress and metrics (`ProgressReports`, `metrics_collector`, published into the
`JobControl` for the endpoint) and the `JobResult`. Its parts: the `FailureManager` decides what a
failed attempt restarts from, the `CommandDesk` sees commands through, `Migrations` moves key
groups live, `ProgressReports` reports progress and keeps the run's history.
Every checkpoint an attempt restores is verified, every byte, before the attempt's tasks start
(`restore_point`), so a corrupt one is refused before a sink commits anything it holds. The
`JobResult` and the progress count the whole job (`job_counts`: counts ride in checkpoints);
the run's history stays in the checkpoint directory (`history`).

A host keeps only what differs: how tasks are launched and how their messages travel.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Iterable

from ...errors import JobCancelledError, JobFailedError
from ...plan.job_graph import JobGraph, TaskId
from ...state.keygroups import RoutingTable
from ...state.manifest import Manifest
from ...state.storage import CheckpointStorage
from ..checkpoints import AbortedCheckpoint, CompletedCheckpoint
from ..clock import Clock
from ..commands import Move, Ticket
from ..metrics import TaskMetrics
from ..result import JobProgress, JobResult, merge_metrics
from ..routing import routing_for
from ..wire.messages import (
    AcknowledgeCheckpoint,
    KeyGroupsAdopted,
    KeyGroupsPrepared,
    PatchStaged,
    PoolResized,
    StateAnswer,
)
from .attempt import Attempt
from .attempt_counts import AttemptCounts
from .command_desk import CommandDesk, RescaleByRestore
from .control import JobControl, JobState
from .enumerator import SplitEnumerators
from .failure_manager import FailureManager
from .job_counts import endpoints
from .metrics_collector import MetricsCollector
from .migrations import Migrations
from .patches import PatchLog
from .progress_reports import ProgressReports
from .recovery import recovery_plan
from .restore_point import start_point
from .start_checks import (
    check_checkpoint_directory,
    check_picklable,
    check_sinks,
    check_sources,
    checkpoints_to_clear,
    clear_checkpoints,
)
from .survivors import SurvivorPlan, survivor_plan

log = logging.getLogger(__name__)


class JobMaster:
    """Runs the attempts of one job on behalf of a host.

    A host calls `start_attempt` (then builds its tasks restoring `restore_from`), routes task
    messages to the attempt, calls `on_failure` when the attempt fails (it raises
    `JobFailedError` once the budget is spent), and `result` once the attempt finished.

    Args:
        job: the job graph.
        clock: the runtime's clock; restart delays pass on it.
        from_checkpoint: `"latest"`, a checkpoint id, a `chk-…` directory or a savepoint path.
        progress: called with a live view of the job, at most twice per `metrics_interval`.
        control: where the job's status is published and commands wait (a `JobHandle`'s, the
            control endpoint's); a private one when None.
        attempts_before: attempts the run had before this job master took over (a rescale in
            place); its attempts are numbered after them.
        ships: how the host ships the job to other processes (Spark's cloudpickle): every
            operator is pickled with it first, so one that does not pickle fails here, named.

    Raises:
        NoCheckpointError: `from_checkpoint` names nothing restorable, or the job has no
            checkpoint directory to restore from.
        CheckpointError: a fresh start over complete checkpoints (`CheckpointConfig.existing`).
        EpochalError: a source's or a sink's `check` refused the job.
    """

    def __init__(
        self,
        job: JobGraph,
        clock: Clock,
        from_checkpoint: str | int | None = None,
        progress: Callable[[JobProgress], None] | None = None,
        control: JobControl | None = None,
        attempts_before: int = 0,
        ships: Callable[[object], bytes] | None = None,
    ) -> None:
        self.job = job
        self.clock = clock
        # attempts of the same run before this job master's (a host that rescaled in place):
        # attempt numbers go on rising, so messages of an older attempt are never taken for new
        self._attempts_before = attempts_before
        self.progress = progress  # the display (`ProgressReports` tells it); a rescale's new job master takes it over
        self.control = control if control is not None else JobControl(job.name, job.parallelism)
        directory = job.config.checkpoint.directory
        resuming = from_checkpoint is not None
        check_sources(job)  # before anything is created or changed on disk
        filesystem = job.config.checkpoint.filesystem
        self.storage = CheckpointStorage(directory, filesystem=filesystem) if directory else None
        if self.storage is not None:
            check_checkpoint_directory(self.storage)
        self.control.checkpoint_directory = directory
        stale = checkpoints_to_clear(self.storage, job) if self.storage and not resuming else []
        if ships is not None:  # a host that ships operators to other processes: each must pickle
            check_picklable(job, ships)  # after the refusals that need no pickler (it imports Spark's)
        self._oldest_ancestor = 0  # a savepoint adopted into the directory has no older ancestors here
        self.migrations = Migrations(job, self.control, self.storage is not None)  # key groups moving live
        self.commands = CommandDesk(job, self.control, self.storage, self.migrations)
        start = None
        if from_checkpoint is not None:  # every byte verified (`restore_point`)
            start = start_point(self.storage, job, from_checkpoint, self.migrations.standby)
            if start.adopted:  # a savepoint copied in: no older checkpoint of the directory is its ancestor
                self._oldest_ancestor = start.manifest.checkpoint_id
        self.restore_from: Manifest | None = start.manifest if start is not None else None
        self.patches = self.commands.patches = PatchLog(job, self.restore_from)  # live logic patches
        check_sinks(job, resuming)  # last check: a sink told to overwrite clears its output here
        if self.storage is not None:
            clear_checkpoints(self.storage, stale, job.name)
        started_from = self.restore_from.checkpoint_id if self.restore_from is not None else None
        self.failure_manager = FailureManager(job, self.storage, started_from, self._oldest_ancestor,
                                              start.refused if start is not None else ())
        self.enumerators = SplitEnumerators(job, self.restore_from, self.storage)  # found splits, across attempts
        self.attempt: Attempt | None = None
        self.restored_from: list[int | None] = []
        self._next_checkpoint_id = 1
        # live metrics, published into `control`; a rescale's new job master goes on with the history
        self.metrics = MetricsCollector(job, self.control.metrics())
        self.metrics.refusals = self.control.refusals  # refused connections, counted by the hosts
        self._give_back: dict[int, int] = {}  # key group → subtask, after a parallel recovery
        self.counts = AttemptCounts(job)  # what the attempt's counts go on from: the whole job's
        self.reports = ProgressReports(job, self.control, self.metrics, self.counts, self.storage, progress,
                                       lambda: self.restarts)  # live progress and the run's history

    # -- attempts --------------------------------------------------------------------------------
    def start_attempt(self, send: Callable[[TaskId, object], None]) -> Attempt:
        """A new attempt, restoring `restore_from`; its tasks are the host's to build."""
        if self.attempt is not None:
            self.attempt.stop()
        self.commands.live_queries.abandon("the job restarted")
        restored = self.restore_from.checkpoint_id if self.restore_from is not None else None
        self.restored_from.append(restored)
        first_id = self._next_checkpoint_id
        if self.storage is not None:
            first_id = max(first_id, max(self.storage.checkpoint_ids(), default=0) + 1)
        if restored is not None:
            first_id = max(first_id, restored + 1)
        replay = self.restore_from.replay if self.restore_from is not None else None
        if replay is not None:
            first_id = max(first_id, *(k + 1 for k in replay.checkpoint_ids))
        self.enumerators.start_attempt(self.job, send, self.restore_from)
        self.patches.restored(self.restore_from)
        self.attempt = Attempt(
            self._attempts_before + len(self.restored_from), self.job, self.storage, self.clock, send, first_id,
            self, self.enumerators, self.patches,
        )
        routing = self.attempt.coordinator.routing = routing_for(self.job, self.restore_from)
        if replay is not None:
            self.attempt.coordinator.replay(replay.checkpoint_ids)
        self.attempt.coordinator.remember_merged(self.restore_from)
        self.attempt.coordinator.counts_base = self.counts.attempt_started(self.restore_from)
        self.migrations.send = self.attempt.send
        self.commands.attempt_started(self.attempt)
        self.metrics.attempt_started()
        self.control.publish(state=JobState.RUNNING, attempt=self.attempt.number, restarts=self.restarts,
                             parallelism=self.migrations.parallelism(routing))
        log.info(
            "job %r: attempt %d starts %s", self.job.name, self.attempt.number,
            "fresh" if restored is None else f"from checkpoint {restored}",
        )
        return self.attempt

    @property
    def restarts(self) -> int:
        return self.failure_manager.restarts

    @property
    def failures(self) -> list[str]:
        return self.failure_manager.failures

    def on_failure(self, cause: BaseException) -> None:
        """The current attempt failed: roll back, or give up once the restart budget is spent.

        Picks the checkpoint the next attempt restores (`restore_from`) and waits the restart
        delay (`FailureManager`).

        Raises:
            JobFailedError: the budget is spent; its cause is `cause`.
        """
        if self.attempt is not None:
            self.attempt.stop()
        self.commands.stop("the attempt failed")
        attempt = self.attempt.number if self.attempt is not None else 0
        self.metrics.attempt_failed(attempt, cause)
        try:
            self.failure_manager.failed(cause, attempt, self.restore_from)
        except JobFailedError as error:
            self.control.publish_metrics(self.metrics.snapshot((), attempt))  # with this failure
            self.reports.final(JobState.FAILED)
            self.control.publish(state=JobState.FAILED, failures=tuple(self.failures))
            self.reports.archive(str(error))
            raise
        self.control.publish_metrics(self.metrics.snapshot((), attempt))
        self.control.publish(state=JobState.RESTARTING, restarts=self.restarts, failures=tuple(self.failures))
        self.reports.archive()
        self.clock.sleep(self.job.config.restart.delay)
        self.restore_from = self.failure_manager.latest_restorable({c.checkpoint_id for c in self.reports.checkpoints})

    def recover_on_holders(self, lost: set[int], holders_of: Callable[[int], list[int]]) -> RoutingTable | None:
        """After `on_failure`: restore the key groups of the `lost` subtasks on the peers holding
        their backups (`runtime.master.recovery`); the table the next attempt starts with, or None."""
        plan = recovery_plan(self.job, self.restore_from, lost, holders_of)
        if plan is None or self.restore_from is None:
            return None
        self.restore_from = dataclasses.replace(self.restore_from, routing=plan.table)
        self._give_back.update(plan.give_back)
        log.info("job %r: the key groups of %s restore on their holders", self.job.name, sorted(lost))
        return plan.table

    def worker_lost(self, lost: set[int]) -> None:
        """Workers `lost` died (a host that keeps the survivors running says so at once): what is
        pending cannot complete, and no checkpoint starts until the survivors caught up."""
        if self.attempt is not None and not self.attempt.coordinator.is_stopped:
            self.attempt.coordinator.restoring({t for t in self.job.task_ids() if t.subtask in lost})

    def recover_survivors(self, lost: set[int], workers: int, cause: BaseException) -> SurvivorPlan | None:
        """Workers `lost` died and were replaced: restore only their tasks, the others running on
        (`runtime.master.survivors`); None where that is not sound (then `on_failure` rolls every
        task back). Counts a restart like any failure.

        Raises:
            JobFailedError: the restart budget is spent.
        """
        attempt = self.attempt
        if attempt is None or attempt.coordinator.is_stopped:
            return None
        restore = self.failure_manager.latest_restorable({c.checkpoint_id for c in self.reports.checkpoints})
        busy = ("key groups are moving" if self.migrations.busy
                else "a patch is under way" if self.patches.under_way is not None else None)
        plan = survivor_plan(self.job, restore, lost, workers, discovering=bool(self.enumerators.logs), busy=busy)
        if isinstance(plan, str):
            log.warning("job %r: every task rolls back after losing worker(s) %s: %s", self.job.name,
                        sorted(lost), plan)
            return None
        self.metrics.attempt_failed(attempt.number, cause)
        try:
            self.failure_manager.failed(cause, attempt.number, self.restore_from)
        except JobFailedError:
            self.control.publish(state=JobState.FAILED, failures=tuple(self.failures))
            raise
        attempt.coordinator.counts_base = self.counts.survivors_restored(restore, lost)
        self.restore_from = restore
        self.commands.stop("a worker was lost")
        self.worker_lost(lost)
        self.control.publish(restarts=self.restarts, failures=tuple(self.failures))
        log.warning("job %r: worker(s) %s restore checkpoint %d; the others run on", self.job.name, sorted(lost),
                    plan.checkpoint_id)
        return plan

    def survivors_caught_up(self) -> None:
        """Every survivor dropped what the restored tasks sent again: checkpoints go on."""
        if self.attempt is not None:
            self.attempt.coordinator.resume()

    def recovered(self) -> None:
        """Every task of the attempt runs: key groups a parallel recovery lent go back, live (the
        ones not back yet: a failure during the move back leaves them lent, and this retries)."""
        if not self._give_back or self.attempt is None:
            return
        routing = self.attempt.coordinator.routing
        self._give_back = moves = {g: s for g, s in self._give_back.items() if not routing or routing.owners[g] != s}
        if not moves:
            return
        ticket = Ticket(Move.of(moves))
        self.migrations.move(ticket, self.attempt.coordinator)
        try:
            ticket.wait(0)
        except TimeoutError:
            pass  # under way
        except Exception as exc:  # noqa: BLE001 - refused: the groups stay where they were restored
            log.warning("job %r: key groups not given back after recovery: %s", self.job.name, exc)

    # -- observing the attempt ---------------------------------------------------------------
    def poll_control(self) -> None:
        """Hosts call this between steps: act on what the job's controllers asked for.

        Raises:
            JobCancelledError: a cancel was requested; the host stops its tasks and lets it out.
            RescaleByRestore: a rescale's checkpoint is complete (`CommandDesk.poll`).
        """
        if self.control.cancel_requested:
            self.commands.stop("the job was cancelled")
            if self.attempt is not None:
                self.attempt.stop()
            log.warning("job %r: cancelled", self.job.name)
            self.reports.final(JobState.CANCELLED)
            self.control.publish(state=JobState.CANCELLED)
            self.reports.archive(f"job {self.job.name!r} was cancelled")
            raise JobCancelledError(self.job.name)
        try:
            self.commands.poll()
        except RescaleByRestore:
            if self.attempt is not None:
                self.attempt.stop()
            raise

    def key_groups_adopted(self, message: KeyGroupsAdopted) -> None:
        self.migrations.adopted(message, self.attempt.coordinator if self.attempt is not None else None)

    def key_groups_prepared(self, message: KeyGroupsPrepared) -> None:
        self.migrations.prepared(message, self.attempt.coordinator if self.attempt is not None else None)

    def state_answered(self, answer: StateAnswer) -> None:
        self.commands.state_answered(answer)

    def patch_staged(self, message: PatchStaged) -> None:
        if self.attempt is not None:
            coordinator = self.attempt.coordinator
            self.patches.staged(message, self.attempt.send, lambda: coordinator.trigger(aligned=True))

    def pool_resized(self, message: PoolResized) -> None:
        self.commands.pools.reported(message)

    def checkpoint_completed(self, checkpoint: CompletedCheckpoint) -> None:
        self.reports.checkpoint_completed(checkpoint.manifest)
        self.counts.checkpoint_completed(checkpoint)
        self.patches.completed(checkpoint.manifest)
        self.metrics.checkpoint_completed(checkpoint.manifest)
        self.control.publish(last_checkpoint=checkpoint.checkpoint_id)
        self.reports.archive(often=True)
        self._next_checkpoint_id = max(self._next_checkpoint_id, checkpoint.checkpoint_id + 1)
        self.failure_manager.completed(checkpoint.checkpoint_id)  # an epoch replayed at its cut: written anew
        if self.attempt is not None:
            self.migrations.completed(checkpoint, self.attempt.send, self.attempt.coordinator)
        self.commands.checkpoint_completed(checkpoint)

    def checkpoint_acknowledged(self, ack: AcknowledgeCheckpoint) -> None:
        if self.attempt is not None:
            self.migrations.acknowledged(ack, self.attempt.coordinator)

    def checkpoint_aborted(self, checkpoint: AbortedCheckpoint) -> None:
        self.metrics.checkpoint_aborted(checkpoint)
        self.commands.checkpoint_aborted(checkpoint)
        self.patches.aborted(checkpoint.checkpoint_id)
        self._next_checkpoint_id = max(self._next_checkpoint_id, checkpoint.checkpoint_id + 1)
        if self.attempt is not None:
            self.migrations.aborted(checkpoint.checkpoint_id, self.attempt.coordinator)

    def report_progress(self, tasks: Callable[[], Iterable[TaskMetrics]], now: bool = False) -> None:
        """Publish a metrics snapshot and report live progress if it is time (or `now`); `tasks`
        (the latest metrics of the attempt's tasks) is only called then (`ProgressReports`)."""
        self.reports.report(tasks, self.attempt.number if self.attempt is not None else 0, now)

    def result(self) -> JobResult:
        """The outcome of the job, once the current attempt finished."""
        assert self.attempt is not None and self.attempt.is_finished
        self.commands.stop("the job finished")  # a move waiting for tasks that finished, say
        final = {task: m.metrics for task, m in self.attempt.finished.items()}
        self.control.publish_metrics(self.metrics.finished(final, self.attempt.number))
        self.reports.final(JobState.FINISHED)
        self.control.publish(state=JobState.FINISHED)
        whole, since = self.counts.result(merge_metrics([m.metrics for m in self.attempt.finished.values()]),
                                          self.restore_from)
        sources, sinks = endpoints(self.job)
        result = JobResult(
            self.job.name,
            self.restarts,
            tuple(self.reports.checkpoints),
            whole,
            tuple(self.failures),
            tuple(self.restored_from),
            operators_since=since,
            since_checkpoint=self.restore_from.checkpoint_id if self.restore_from is not None else None,
            counts_whole=self.counts.base is not None,
            refused=tuple(self.failure_manager.refused_reasons),
            sources=sources,
            sinks=sinks,
        )
        self.reports.archive(result.summary(), operators=result.operators)
        return result
