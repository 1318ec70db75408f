"""The job master's side of one job on Spark: the barrier stages it launches, and their supervision.

`cluster.spark` builds the job master and the session, then hands the job to a `StageHost`,
which submits a barrier stage of one task per worker (`cluster.barrier_stage`; what each task
runs: `cluster.stage_task`), waits for every worker's control link (`cluster.control_links`),
starts the job master's attempts on them and routes their messages until the job ends.

The job master decides every restart; the host carries it out in one of these ways:
- a task that raises leaves its process alive: the next *attempt* starts in place, every worker
  rebuilding its tasks from the checkpoint the job master picked, with no Spark work;
- a worker process that dies (SIGKILL, OOM) while its Spark task lives is replaced by its
  supervisor (`cluster.supervisor`): the host waits for the new process's hello and restarts the
  attempt in place (or, with `RecoveryConfig(survivors=True)`, restores only the lost workers);
- a worker's whole Spark task dying or a lost executor fails the barrier stage, which Spark
  never retries for a result stage: the host cancels what is left and submits a new stage (a new
  *launch*), whose workers start the next attempt;
- a link between two workers that breaks while both processes live (the network: `LinkBroken`)
  restarts the attempt in place once a short grace shows neither process died, which links the
  two anew.
The host numbers launches and the job master attempts, since a rerun Spark task cannot tell that
it is a retry.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from ..errors import EpochalError
from ..plan.job_graph import JobGraph, TaskId
from ..runtime.master.attempt import Attempt
from ..runtime.master.command_desk import RescaleByRestore
from ..runtime.master.job_master import JobMaster
from ..runtime.metrics import TaskMetrics
from ..runtime.result import JobResult
from ..runtime.wire.handshake import new_secret
from ..runtime.wire.network import Link, LinkClosed
from ..state.backups import holders
from ..state.keygroups import RoutingTable
from .barrier_stage import BarrierStage
from .control_links import ControlLinks
from .link_guard import LinkGuard
from .protocol import (
    CaughtUp,
    FromTask,
    Hello,
    JobMasterUnreachable,
    LinkBroken,
    LinkRefused,
    Progress,
    Running,
    ToTask,
    WorkerFailed,
    worker_of,
)
from .session import BIND_HOST_ENV, is_connect
from .stage_records import StageRecords
from .stage_task import describe_failure, raised_in_task, unreachable_in, worker_function

log = logging.getLogger(__name__)

_HELLO_TIMEOUT = 300.0
_PEER_LOST_GRACE = 1.0  # seconds a broken link between workers waits for news of a dead process


class WorkerLost(EpochalError):
    """A worker process died or its Spark stage failed; the job is relaunched."""


class LaunchFailed(WorkerLost):
    """A stage ended before every worker connected: its tasks could not start. The same failure
    twice in a row (`fingerprint`, read by the job master) will recur: the job is not relaunched
    again (a job graph the workers cannot unpickle, a module they cannot import)."""

    def __init__(self, why: str, raised: bool) -> None:
        super().__init__(f"the Spark stage ended before every worker connected: {why}")
        if raised:  # a Python error the task raised (not a process killed, an executor lost): it recurs
            self.fingerprint = ("<launch>", why, "")


class StageHost:
    """The job master's side of one job on Spark: its launches, their supervision, and the workers'
    messages (their links: `ControlLinks`)."""

    def __init__(
        self, master: JobMaster, spark: Any, workers: int, host: str, records: StageRecords,
        recompile: Callable[[int], JobGraph] | None = None,
    ) -> None:
        self.master = master
        self.recompile = recompile
        self.job = master.job
        self.spark = spark
        self.connect = is_connect(spark)
        self.workers = workers
        self.secret = new_secret()  # the job's: to the workers in the stage's closure, never on a link
        guard = LinkGuard(self.secret, self.job.config.network)
        self.links = ControlLinks(host, workers, guard, master.control.refusals)
        self.address = self.links.address
        self.peer_lost: tuple[float, LinkBroken] | None = None  # a broken link, restarted after the grace
        self.launches = 0
        self.running: set[int] = set()
        self.local_bytes = 0  # this attempt's restore read from chained backups' copies
        self.attempt: Attempt | None = None
        self.failed_at: float | None = None
        self.records = records  # the executor's: what this host measured and learnt
        self.live: dict[TaskId, TaskMetrics | tuple[Any, ...]] = {}
        self.catching_up: set[int] = set()  # survivors dropping what restored workers send again
        self.recovering = False  # lost workers restore while the others run on

    # -- launches --------------------------------------------------------------------------------
    def _event(self, name: str) -> None:
        self.records.event(name)

    def _submit(self) -> BarrierStage:
        self._event("submitted")
        self.launches += 1
        number = self.launches
        fn = worker_function(self.job, self.workers, number, self.address, self.secret)
        description = f"epochal {self.job.name} launch {number}"
        return BarrierStage.submit(self.spark, self.connect, self.workers, number, fn, description)

    def _accept_workers(self, launch: BarrierStage) -> None:
        """Wait for every worker of `launch` to say hello on the control port."""
        self.links.reset()
        self.records.launched()
        deadline = time.monotonic() + _HELLO_TIMEOUT
        while len(self.links.linked()) < self.workers:
            if launch.is_done:
                unreachable = unreachable_in(launch.error)
                if unreachable is not None:
                    raise JobMasterUnreachable(
                        f"{unreachable}; the job master runs in this process: run it where the executors can "
                        f"reach it, or set {BIND_HOST_ENV} to an address of this machine they can reach "
                        "(docs/operations.md, Running on Spark Connect)"
                    )
                raise LaunchFailed(describe_failure(launch.error), raised_in_task(launch.error))
            if time.monotonic() > deadline:
                raise WorkerLost("workers did not connect in time")
            hello = self.links.next_hello(launch.number, 0.2)
            if hello is not None:
                self._add_worker(*hello)
        self.records.connected()
        self.master.control.publish(listening=self.links.listening_status())

    def _add_worker(self, hello: Hello, link: Link) -> None:
        self.records.said_hello(hello)
        if self.links.add(hello, link):
            self._event("rendezvous")

    def _replace_workers(self, launch: BarrierStage, lost: set[int], cause: BaseException) -> None:
        """Worker processes died while their Spark tasks live on: wait for the processes their
        supervisors start in their place (`cluster.supervisor`), then restart the attempt in
        place, on them and on the other workers' running processes, with no new stage."""
        if self.failed_at is None:
            self.failed_at = time.monotonic()
        self._event("worker lost")
        survivors = self.job.config.recovery.survivors
        told: set[int] = set()
        deadline = time.monotonic() + _HELLO_TIMEOUT
        self.peer_lost = None  # the dead process broke it
        while True:
            lost |= self.links.closed()
            if survivors and lost - told:  # the others run on, logging what they send the lost
                self._tell_survivors(lost - told)
                told |= lost
            self.links.drop_closed(lost)
            if self.links.has(lost):
                break
            if launch.is_done:
                raise WorkerLost(f"the Spark stage ended: {describe_failure(launch.error)}")
            if time.monotonic() > deadline:
                raise WorkerLost(f"workers {sorted(lost)} died and were not replaced in time")
            hello = self.links.next_hello(launch.number, 0.05)
            if hello is not None and self.links.replaces(hello[0]):
                self._add_worker(*hello)
            elif hello is not None:
                hello[1].close()
        self._event("replaced")
        workers = ", ".join(str(w) for w in sorted(lost))
        if survivors and self._restore_lost(lost, WorkerLost(f"{cause}; worker {workers} replaced by a new process")):
            return
        self._fail(WorkerLost(f"{cause}; worker {workers} replaced by a new process, restarted in place"))
        replicas = self.job.config.state.backup_replicas
        routing = None
        if replicas:  # the lost groups restore on the peers holding their copies (parallel recovery)
            routing = self.master.recover_on_holders(lost, lambda w: holders(w, self.workers, replicas))
            if routing is not None:
                self.records.recovery_tables.append(routing)
        self._start_attempt(routing=routing)

    def _tell_survivors(self, lost: set[int]) -> None:
        """Workers died: the survivors keep running (`runtime.master.survivors`); what the lost
        tasks would have acknowledged is aborted meanwhile."""
        self.master.worker_lost(lost)
        self.links.tell_lost(lost)

    def _restore_lost(self, lost: set[int], cause: BaseException) -> bool:
        """Restore only the lost workers' tasks, on their new processes; False where that is not
        sound (every task then rolls back)."""
        plan = self.master.recover_survivors(lost, self.workers, cause)
        if plan is None or self.attempt is None:
            return False
        self.running -= lost
        self.catching_up, self.recovering = self.links.linked() - lost, True
        self.records.survivor_recoveries.append((sorted(lost), plan.checkpoint_id))
        self.links.rejoin(lost, self.attempt.number, plan.checkpoint_id)
        return True

    def _stop_workers(self, launch: BarrierStage, cancel: bool) -> None:
        """Tell every worker to leave; cancel the Spark job too when the stage is being given up."""
        self.links.stop()
        if cancel:
            launch.cancel()
        launch.join(timeout=60)
        self.links.drop_all()
        if launch.error and not cancel:
            log.warning("the Spark stage ended with %s after the job finished", launch.error[0])

    # -- attempts --------------------------------------------------------------------------------
    def _start_attempt(self, job: bytes | None = None, routing: RoutingTable | None = None) -> None:
        self.running = set()
        self.local_bytes = 0
        self.live = {}
        self.peer_lost = None
        self.attempt = self.master.start_attempt(self._send)
        restore = self.master.restore_from
        checkpoint = restore.checkpoint_id if restore is not None else None
        replay = restore.replay if restore is not None else None
        self.links.start(self.attempt.number, checkpoint, job, routing, replay)

    def _rescale_in_place(self, rescale: RescaleByRestore) -> bool:
        """Restart the tasks at the new parallelism in this stage, from the rescale's checkpoint,
        if the stage has the workers the job wants, `max(parallelism, max_workers)` (a job without
        standby slots that scales down frees its slots); else False: the host leaves by `RescaleByRestore`
        and the job is relaunched in a new stage (so too when nobody can compile it anew)."""
        wanted = max(rescale.parallelism, self.job.config.max_workers or 0)
        if self.recompile is None or wanted != self.workers:
            return False
        from pyspark import cloudpickle

        job = self.recompile(rescale.parallelism)
        old = self.master
        assert old.attempt is not None
        self.master = JobMaster(
            job, old.clock, rescale.checkpoint_id, old.progress, old.control, attempts_before=old.attempt.number
        )
        self.job = job
        self._event("rescaled")
        self._start_attempt(cloudpickle.dumps(job))
        rescale.done(self.master.control, job.parallelism)
        log.warning("job %r: rescaled in place to %d (of %d workers)", job.name, rescale.parallelism, self.workers)
        return True

    def _send(self, task: TaskId, message: Any) -> None:
        self.links.send(worker_of(task), ToTask(task, message))

    def _fail(self, cause: BaseException) -> None:
        """The attempt failed: the job master decides (raises JobFailedError when spent)."""
        if self.failed_at is None:  # else: failed again while recovering; count from the first
            self.failed_at = time.monotonic()
        self._event("failed")
        self.master.on_failure(cause)

    # -- the loop --------------------------------------------------------------------------------
    def run(self) -> JobResult:
        try:
            while True:
                launch = self._submit()
                try:
                    self._accept_workers(launch)
                    self._start_attempt()
                    while True:
                        try:
                            self._supervise(launch)
                            break
                        except RescaleByRestore as rescale:
                            if not self._rescale_in_place(rescale):
                                raise
                except WorkerLost as exc:
                    self._stop_workers(launch, cancel=True)
                    self._fail(exc)
                    continue
                except BaseException:
                    self._stop_workers(launch, cancel=True)
                    raise
                self._stop_workers(launch, cancel=False)
                self._event("finished")
                return self.master.result()
        finally:
            self.links.close()

    def _supervise(self, launch: BarrierStage) -> None:
        """Run until every task finished; in-place restarts here, worker loss raises WorkerLost."""
        while True:
            attempt = self.attempt
            assert attempt is not None
            if attempt.is_finished:
                return
            if attempt.failure is not None:  # e.g. too many failed checkpoints
                self._restart_in_place(attempt.failure)
                continue
            self.master.poll_control()
            attempt.coordinator.tick()
            self.links.accept()
            if self.peer_lost is not None and time.monotonic() - self.peer_lost[0] >= _PEER_LOST_GRACE:
                lost = self.peer_lost[1]
                self._restart_in_place(WorkerLost(
                    f"the link between workers {lost.worker} and {lost.peer} broke ({lost.reason})"))
                continue
            gone = self.links.flush()
            if gone is not None:
                self._replace_workers(launch, {gone[0]}, WorkerLost(f"worker {gone[0]} is gone ({gone[1]})"))
            if launch.is_done:
                raise WorkerLost(f"the Spark stage ended: {describe_failure(launch.error)}")
            for worker, messages in self.links.receive(0.01):
                if isinstance(messages, LinkClosed):
                    self._replace_workers(launch, {worker}, WorkerLost(f"worker {worker} is gone ({messages})"))
                    break
                for message in messages:
                    self._on_message(message)

    def _on_message(self, message: Any) -> None:
        attempt = self.attempt
        assert attempt is not None
        kind = type(message)
        if getattr(message, "attempt", attempt.number) != attempt.number:
            return  # from before a restart
        if kind is FromTask:
            attempt.deliver(message.message)
        elif kind is Progress:
            self.live.update(message.tasks)
            self.master.report_progress(self._live_metrics)
        elif kind is Running:
            self.running.add(message.worker)
            self.local_bytes += message.local_bytes
            if len(self.running) == self.workers:
                self._event("running")
                self.master.recovered()
                self.records.running_again(self.local_bytes, self.failed_at)
                self.failed_at = None
                self._caught_up(None)
        elif kind is CaughtUp:
            self._caught_up(message.worker)
        elif kind is WorkerFailed:
            error = message.error if isinstance(message.error, BaseException) else EpochalError(str(message.error))
            self._restart_in_place(error)
        elif kind is LinkBroken and self.peer_lost is None and self._current(message):
            log.warning("worker %d lost its link to worker %d: %s", message.worker, message.peer, message.reason)
            self.peer_lost = (time.monotonic(), message)
        elif kind is LinkRefused:
            self.master.control.refusals.add(message.refusal)

    def _current(self, broken: LinkBroken) -> bool:
        """Whether a broken link joined this attempt's processes (not a dead one's: its loss is
        handled as such, and survivors run on without it)."""
        return (
            self.attempt is not None
            and broken.attempt == self.attempt.number
            and broken.incarnation == self.links.incarnation_of(broken.peer)
            and not self.recovering
        )

    def _caught_up(self, worker: int | None) -> None:
        """A survivor dropped what restored workers sent again: once all did, and every worker
        runs, checkpoints go on."""
        if not self.recovering:
            return
        if worker is not None:
            self.catching_up.discard(worker)
        if not self.catching_up and len(self.running) == self.workers:
            self.recovering = False
            self._event("caught up")
            self.master.survivors_caught_up()

    def _live_metrics(self) -> list[TaskMetrics]:
        """The workers' latest task metrics (a worker that sends only counts: counts only)."""
        return [m if isinstance(m, TaskMetrics) else TaskMetrics.of_counts(t, m) for t, m in self.live.items()]

    def _restart_in_place(self, error: BaseException) -> None:
        self._fail(error)  # raises JobFailedError when the budget is spent
        self._start_attempt()
