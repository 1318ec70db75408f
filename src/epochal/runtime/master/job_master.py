"""The job master: what every host does to run a job, whatever moves its bytes.

One job master serves both hosts (the in-process executor and the Spark barrier stage). It owns
- the checks before the first attempt (`start_checks`: sources, sinks, and a fresh start over
  an earlier run's checkpoints), which a host runs before it starts Spark;
- checkpoint storage and the resolution of `from_checkpoint` (a savepoint is adopted into the
  job's own storage, so every host restores by checkpoint id);
- attempts: their numbers and the checkpoint ids they continue from;
- the failure manager: rollback recovery (dissertation §4.1.3.1): any failure of an attempt,
  a task's error, a lost worker or too many failed checkpoints, stops it, and the next attempt
  restores the latest complete checkpoint, until the restart budget (`RestartStrategy`) is spent,
  or until the same record fails the same way on two attempts in a row (`_recurs`: a poison pill
  fails again on every attempt, so retrying it only repeats the traceback);
  a checkpoint found corrupt while restoring is refused and the one before it is used;
- the checkpoint history, live progress and metrics (`runtime.metrics`, published into the
  `JobControl` for the endpoint), and the `JobResult`.

A host keeps only what differs: how tasks are launched and how their messages travel. Job
control goes through here too: the status is published to a `JobControl`, and cancels,
savepoints and rescales are acted on (`poll_control`) between the host's steps.

About 480 lines, past the 450 we aim for: the failure manager, the commands and the checkpoint
callbacks all read and change the current attempt and the restart budget; what stands alone is
in modules of its own (`start_checks`, `migrations`, `recovery`, `metrics`, `control`).
"""

from __future__ import annotations

import dataclasses
import logging
import math
import time
from collections.abc import Callable, Iterable

from ...errors import (
    CheckpointError,
    CorruptCheckpointError,
    EpochalError,
    JobCancelledError,
    JobFailedError,
    NoCheckpointError,
    RecordError,
    ReplayAbandoned,
)
from ...plan.job_graph import JobGraph, TaskId
from ...state.keygroups import RoutingTable
from ...state.manifest import Manifest
from ...state.savepoints import create_savepoint
from ...state.storage import CheckpointStorage
from ..clock import Clock
from ..in_flight import check_in_flight
from ..metrics import MetricsCollector, TaskMetrics
from ..migration import routing_for
from ..result import CheckpointSummary, JobProgress, JobResult, merge_metrics
from ..wire.messages import AcknowledgeCheckpoint, KeyGroupsAdopted, KeyGroupsPrepared, StateAnswer
from .attempt import Attempt
from .control import Command, JobControl, JobState, MoveRequest, Rescale
from .coordinator import AbortedCheckpoint, CompletedCheckpoint
from .enumerator import SplitEnumerators
from .live_queries import LiveQueries
from .migrations import Migrations
from .recovery import recovery_plan
from .replay import Replays
from .start_checks import check_sinks, check_sources, checkpoints_to_clear, clear_checkpoints

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
    ) -> None:
        self.job = job
        self.clock = clock
        # attempts of the same run before this job master's (a host that rescaled in place):
        # attempt numbers go on rising, so messages of an older attempt are never taken for new
        self._attempts_before = attempts_before
        self.progress = progress
        self.control = control if control is not None else JobControl(job.name, job.parallelism)
        directory = job.config.checkpoint.directory
        resuming = from_checkpoint is not None
        check_sources(job)  # before anything is created or changed on disk
        filesystem = job.config.checkpoint.filesystem
        self.storage = CheckpointStorage(directory, filesystem=filesystem) if directory else None
        self.control.checkpoint_directory = directory
        stale = checkpoints_to_clear(self.storage, job) if self.storage and not resuming else []
        self._oldest_ancestor = 0  # a savepoint adopted into the directory has no older ancestors here
        self.migrations = Migrations(job, self.control, self.storage is not None)  # key groups moving live
        self.restore_from: Manifest | None = self._resolve(from_checkpoint)
        check_sinks(job, resuming)  # last check: a sink told to overwrite clears its output here
        if self.storage is not None:
            clear_checkpoints(self.storage, stale, job.name)
        self._started_from = self.restore_from.checkpoint_id if self.restore_from is not None else None
        self.enumerators = SplitEnumerators(job, self.restore_from, self.storage)  # found splits, across attempts
        self.attempt: Attempt | None = None
        self.restarts = 0
        self.failures: list[str] = []
        self.restored_from: list[int | None] = []
        self.checkpoints: list[CheckpointSummary] = []
        self.aborted: list[AbortedCheckpoint] = []
        self._refused: set[int] = set()  # checkpoints found corrupt: never restored again (unless replayed anew)
        self.replays = Replays(job, self.storage)  # after a fallback: epochs replayed at their cuts
        self._last_failure: tuple[str, str, str] | None = None  # the previous attempt's record failure
        self._next_checkpoint_id = 1
        self._last_progress = float("-inf")
        every = job.config.metrics_interval
        self._progress_interval = math.inf if every is None else every / 2  # progress and metrics snapshots
        # live metrics, published into `control`; a rescale's new job master goes on with the history
        self.metrics = MetricsCollector(job, self.control.metrics())
        self.metrics.refusals = self.control.refusals  # refused connections, counted by the hosts
        self._commands: dict[int, Command] = {}  # checkpoint id → the command waiting for it
        self._rescale: Rescale | None = None  # a rescale whose checkpoint is complete
        self._live_queries = LiveQueries()  # live state queries waiting for their task's answer
        self._give_back: dict[int, int] = {}  # key group → subtask, after a parallel recovery

    def _resolve(self, from_checkpoint: str | int | None) -> Manifest | None:
        if from_checkpoint is None:
            return None
        if self.storage is None:
            raise NoCheckpointError("from_checkpoint needs CheckpointConfig(directory=...)")
        manifest = self.storage.resolve(from_checkpoint)
        check_in_flight(manifest, self.job)
        table = manifest.routing
        if table is not None and self.migrations.standby and table.active != self.job.parallelism:
            # the job was rescaled live since; it starts at the parallelism it is given now
            log.info("job %r: checkpoint %d ran at parallelism %d; starting at %d", self.job.name,
                     manifest.checkpoint_id, table.active, self.job.parallelism)
            manifest = dataclasses.replace(manifest, routing=None)
        if manifest.is_savepoint:  # tasks restore by id from the job's own storage
            manifest = self.storage.adopt(manifest)
            self._oldest_ancestor = manifest.checkpoint_id
        log.info("job %r restores checkpoint %d", self.job.name, manifest.checkpoint_id)
        return manifest

    # -- attempts --------------------------------------------------------------------------------
    def start_attempt(self, send: Callable[[TaskId, object], None]) -> Attempt:
        """A new attempt, restoring `restore_from`; its tasks are the host's to build."""
        if self.attempt is not None:
            self.attempt.stop()
        self._live_queries.abandon("the job restarted")
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
        self.attempt = Attempt(
            self._attempts_before + len(self.restored_from), self.job, self.storage, self.clock, send, first_id,
            self, self.enumerators,
        )
        routing = self.attempt.coordinator.routing = routing_for(self.job, self.restore_from)
        if replay is not None:
            self.attempt.coordinator.replay(replay.checkpoint_ids)
        self.migrations.send = self.attempt.send
        self.metrics.attempt_started()
        self.control.publish(state=JobState.RUNNING, attempt=self.attempt.number, restarts=self.restarts,
                             parallelism=self.migrations.parallelism(routing))
        log.info(
            "job %r: attempt %d starts %s", self.job.name, self.attempt.number,
            "fresh" if restored is None else f"from checkpoint {restored}",
        )
        return self.attempt

    def on_failure(self, cause: BaseException) -> None:
        """The current attempt failed: roll back, or give up once the restart budget is spent.

        Picks the checkpoint the next attempt restores (`restore_from`) and waits the restart
        delay. A `CorruptCheckpointError` met while restoring refuses that checkpoint for good.

        Raises:
            JobFailedError: the budget is spent; its cause is `cause`.
        """
        if self.attempt is not None:
            self.attempt.stop()
        self._stop_commands("the attempt failed")
        self.failures.append(f"{type(cause).__name__}: {cause}")
        attempt = self.attempt.number if self.attempt is not None else 0
        self.metrics.attempt_failed(attempt, cause)
        log.warning("job %r: attempt %d failed: %s", self.job.name, attempt, cause)
        if isinstance(cause, CorruptCheckpointError) and self.restore_from is not None:
            self._refused.add(self.restore_from.checkpoint_id)
        recurring = self._recurs(cause)
        if recurring or self.restarts >= self.job.config.restart.max_restarts:
            self.control.publish(state=JobState.FAILED, failures=tuple(self.failures))
            raise JobFailedError(self.job.name, self.restarts + 1, cause, recurring) from cause
        self.restarts += 1
        self.control.publish(state=JobState.RESTARTING, restarts=self.restarts, failures=tuple(self.failures))
        self.clock.sleep(self.job.config.restart.delay)
        if isinstance(cause, ReplayAbandoned) and self.restore_from is not None:
            self.replays.abandoned(self.restore_from.replay)
        self.restore_from = self._latest_restorable()
        if self.restore_from is not None:
            self.restore_from = self.replays.restore(self.restore_from, self._refused)

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

    def recovered(self) -> None:
        """Every task of the attempt runs: key groups a parallel recovery lent go back, live (the
        ones not back yet: a failure during the move back leaves them lent, and this retries)."""
        if not self._give_back or self.attempt is None:
            return
        routing = self.attempt.coordinator.routing
        self._give_back = moves = {g: s for g, s in self._give_back.items() if not routing or routing.owners[g] != s}
        if not moves:
            return
        command = Command("move", MoveRequest(tuple(sorted(moves.items()))))
        self.migrations.move(command, self.attempt.coordinator)
        try:
            command.wait(0)
        except TimeoutError:
            pass  # under way
        except Exception as exc:  # noqa: BLE001 - refused: the groups stay where they were restored
            log.warning("job %r: key groups not given back after recovery: %s", self.job.name, exc)

    def _recurs(self, cause: BaseException) -> bool:
        """Whether this attempt failed on the same record, in the same operator, with the same
        exception type as the one before: user code failing deterministically (a poison pill)
        would fail every further attempt the same way."""
        fingerprint = _record_failure(cause)
        previous, self._last_failure = self._last_failure, fingerprint
        return fingerprint is not None and fingerprint == previous

    def _latest_restorable(self) -> Manifest | None:
        """The newest complete checkpoint of this job's own lineage that is not refused.

        The lineage is what this run completed, and, when it started from a checkpoint, that one
        and those before it (for an adopted savepoint, only itself). A checkpoint directory may
        hold newer checkpoints of an earlier run (the job was started from an older one):
        restoring one of those would mix two histories.
        None restarts from scratch.
        """
        if self.storage is None:
            return None
        own = {c.checkpoint_id for c in self.checkpoints}
        start = self._started_from
        complete = self.storage.complete_checkpoints()
        ancestors = range(self._oldest_ancestor, start + 1) if start is not None else range(0)
        lineage = sorted({cid for cid in complete if cid in own or cid in ancestors})
        for checkpoint_id in reversed(lineage):
            if checkpoint_id in self._refused:
                continue
            try:
                manifest = self.storage.resolve(checkpoint_id)
            except CorruptCheckpointError as exc:
                log.warning("job %r: checkpoint %d refused: %s", self.job.name, checkpoint_id, exc)
                self._refused.add(checkpoint_id)
                continue
            except NoCheckpointError:  # dropped by retention meanwhile
                continue
            if self._refused:
                newer = sorted(c for c in self._refused if c > checkpoint_id)
                log.warning(
                    "job %r: checkpoint(s) %s refused as corrupt; restoring checkpoint %d%s",
                    self.job.name, sorted(self._refused), checkpoint_id,
                    f" (the sinks may have committed the output of checkpoint(s) {newer}: replayed from "
                    f"checkpoint {checkpoint_id}, it can appear twice)" if newer else "",
                )
            return manifest
        return None

    # -- observing the attempt ---------------------------------------------------------------
    def poll_control(self) -> None:
        """Hosts call this between steps: act on what the job's controllers asked for.

        Raises:
            JobCancelledError: a cancel was requested; the host stops its tasks and lets it out.
            Rescale: a rescale's checkpoint is complete; the host stops its tasks and lets it out,
                and whoever called the host relaunches the job from it at the new parallelism.
        """
        control = self.control
        if control.cancel_requested:
            self._stop_commands("the job was cancelled")
            if self.attempt is not None:
                self.attempt.stop()
            log.warning("job %r: cancelled", self.job.name)
            control.publish(state=JobState.CANCELLED)
            raise JobCancelledError(self.job.name)
        if self._rescale is not None:
            rescale, self._rescale = self._rescale, None
            if self.attempt is not None:
                self.attempt.stop()
            self._stop_commands("the job is rescaling")  # a move or savepoint begun since: its attempt ends here
            log.warning("job %r: rescaling to %d from checkpoint %d", self.job.name, rescale.parallelism,
                        rescale.checkpoint_id)
            control.publish(state=JobState.RESTARTING)
            raise rescale
        command = control.next_command()
        if command is not None:
            self._start_command(command)

    def _start_command(self, command: Command) -> None:
        """Ask a live state query; trigger the checkpoint a savepoint or a rescale starts from."""
        coordinator = self.attempt.coordinator if self.attempt is not None else None
        if command.kind == "query":
            if self.attempt is None:
                command.finish(error=EpochalError(f"job {self.job.name!r} is not running; no live state"))
            else:
                self._live_queries.ask(self.job, command, self.attempt.send, self._routing())
            return
        if command.kind in ("move", "rescale") and self._commands:
            # a rerouting checkpoint completing first would subsume the savepoint's or rescale's
            waiting = next(iter(self._commands.values()))
            command.finish(error=EpochalError(f"a {waiting.kind} is under way; no {command.kind} until its "
                                              "checkpoint completed"))
            return
        if command.kind == "move":
            self.migrations.move(command, coordinator)
            return
        if command.kind == "rescale":
            n = command.argument
            if not isinstance(n, int) or isinstance(n, bool) or not 1 <= n <= self.job.max_parallelism:
                command.finish(error=ValueError(
                    f"parallelism must be an int from 1 to max_parallelism ({self.job.max_parallelism}), got {n!r}"))
                return
            slots = self.control.max_workers
            if slots is not None and n > slots:  # refused before any checkpoint: the job runs on as it is
                command.finish(error=EpochalError(
                    f"a rescale to {n} needs {n} task slots; the cluster has {slots}"))
                return
            if n == self.control.status().parallelism and not self.migrations.busy:
                # where it runs already: nothing moves, nothing restarts
                completed = coordinator.completed if coordinator is not None else []
                command.finish(result=completed[-1].checkpoint_id if completed else None)
                return
            if self.migrations.rescale(command, coordinator, n):  # onto standby subtasks, no restart
                return
        if self.migrations.busy:  # its checkpoint would miss the groups on their way
            command.finish(error=EpochalError(f"key groups are moving; no {command.kind} until they moved"))
        elif self.storage is None:
            command.finish(error=EpochalError(f"a {command.kind} needs CheckpointConfig(directory=...)"))
        elif coordinator is None or coordinator.is_stopped or coordinator.final_checkpoint is not None:
            command.finish(error=EpochalError(f"job {self.job.name!r} is ending; no {command.kind} now"))
        else:
            self._commands[coordinator.trigger(aligned=True)] = command  # restorable at any parallelism

    def _routing(self) -> RoutingTable | None:
        return self.attempt.coordinator.routing if self.attempt is not None else None

    def key_groups_adopted(self, message: KeyGroupsAdopted) -> None:
        self.migrations.adopted(message, self.attempt.coordinator if self.attempt is not None else None)

    def key_groups_prepared(self, message: KeyGroupsPrepared) -> None:
        self.migrations.prepared(message, self.attempt.coordinator if self.attempt is not None else None)

    def state_answered(self, answer: StateAnswer) -> None:
        self._live_queries.answered(answer)

    def _stop_commands(self, why: str) -> None:
        self._live_queries.abandon(why)
        self.migrations.abandon(why)
        for checkpoint_id, command in self._commands.items():
            command.finish(error=EpochalError(f"{command.kind} abandoned: {why} before checkpoint "
                                              f"{checkpoint_id} completed"))
        self._commands.clear()

    def checkpoint_completed(self, checkpoint: CompletedCheckpoint) -> None:
        self.checkpoints.append(CheckpointSummary.of(checkpoint.manifest))
        self.metrics.checkpoint_completed(checkpoint.manifest)
        self.control.publish(last_checkpoint=checkpoint.checkpoint_id)
        self._next_checkpoint_id = max(self._next_checkpoint_id, checkpoint.checkpoint_id + 1)
        self._refused.discard(checkpoint.checkpoint_id)  # an epoch replayed at its cut: written anew
        self.replays.completed(checkpoint.checkpoint_id)
        if self.attempt is not None:
            self.migrations.completed(checkpoint, self.attempt.send, self.attempt.coordinator)
        for older in [cid for cid in self._commands if cid < checkpoint.checkpoint_id]:  # subsumed: never completes
            waiting = self._commands.pop(older)
            waiting.finish(error=CheckpointError(f"checkpoint {older} for the {waiting.kind} was subsumed by "
                                                 f"checkpoint {checkpoint.checkpoint_id}, which completed first"))
        command = self._commands.pop(checkpoint.checkpoint_id, None)
        if command is None:
            return
        if command.kind == "rescale":
            assert isinstance(command.argument, int)
            self._rescale = Rescale(checkpoint.checkpoint_id, command.argument, command)
            return
        assert self.storage is not None
        try:  # on the job master's thread: the checkpoint must not be dropped by retention meanwhile
            savepoint = create_savepoint(self.storage, checkpoint.checkpoint_id, str(command.argument))
        except (EpochalError, OSError) as exc:
            command.finish(error=exc)
        else:
            log.info("job %r: savepoint of checkpoint %d at %s", self.job.name, checkpoint.checkpoint_id,
                     command.argument)
            command.finish(result=savepoint.location or str(command.argument))

    def checkpoint_acknowledged(self, ack: AcknowledgeCheckpoint) -> None:
        if self.attempt is not None:
            self.migrations.acknowledged(ack, self.attempt.coordinator)

    def checkpoint_aborted(self, checkpoint: AbortedCheckpoint) -> None:
        self.aborted.append(checkpoint)
        self.metrics.checkpoint_aborted(checkpoint)
        command = self._commands.pop(checkpoint.checkpoint_id, None)
        if command is not None:
            command.finish(error=CheckpointError(
                f"checkpoint {checkpoint.checkpoint_id} for the {command.kind} was aborted: {checkpoint.reason.value}"
                + (f" ({checkpoint.detail})" if checkpoint.detail else "")))
        self._next_checkpoint_id = max(self._next_checkpoint_id, checkpoint.checkpoint_id + 1)
        if self.attempt is not None:
            self.migrations.aborted(checkpoint.checkpoint_id, self.attempt.coordinator)

    def report_progress(self, tasks: Callable[[], Iterable[TaskMetrics]], now: bool = False) -> None:
        """Publish a metrics snapshot and report live progress if it is time (or `now`); `tasks`
        (the latest metrics of the attempt's tasks) is only called then."""
        at = time.monotonic()
        if not now and (at - self._last_progress < self._progress_interval or self._progress_interval == math.inf):
            return
        self._last_progress = at
        attempt = self.attempt.number if self.attempt is not None else 0
        metrics = self.metrics.snapshot(tasks(), attempt)
        self.control.publish_metrics(metrics)
        if self.progress is not None:
            newest = self.checkpoints[-1] if self.checkpoints else None
            lags = [op.watermark_lag_s for op in metrics.operators if op.watermark_lag_s is not None]
            marks = [op.watermark for op in metrics.operators if math.isfinite(op.watermark)]
            status = self.control.status()
            self.progress(JobProgress(
                metrics.records_in, metrics.records_out, len(self.checkpoints),
                newest.duration_ms if newest else None, self.restarts, metrics.in_rate,
                max(lags) if lags else None, min(marks) if marks else None,
                newest.checkpoint_id if newest else None, self.job.name, status.state.value, self.control.web_url,
            ))

    def result(self) -> JobResult:
        """The outcome of the job, once the current attempt finished."""
        assert self.attempt is not None and self.attempt.is_finished
        self._stop_commands("the job finished")  # a move waiting for tasks that finished, say
        final = {task: m.metrics for task, m in self.attempt.finished.items()}
        self.control.publish_metrics(self.metrics.finished(final, self.attempt.number))
        self.control.publish(state=JobState.FINISHED)
        return JobResult(
            self.job.name,
            self.restarts,
            tuple(self.checkpoints),
            merge_metrics([m.metrics for m in self.attempt.finished.values()]),
            tuple(self.failures),
            tuple(self.restored_from),
        )


def _record_failure(cause: BaseException | None) -> tuple[str, str, str] | None:
    """The fingerprint of the user-code failure on a record behind `cause` (it, or what it wraps)."""
    for _ in range(8):  # a short chain of causes: a host may wrap the task's error
        if cause is None:
            return None
        if isinstance(cause, RecordError):
            return cause.fingerprint
        cause = cause.__cause__
    return None
