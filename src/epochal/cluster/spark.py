"""The Spark host: a job runs as one barrier-mode stage of N long-running tasks.

Spark gang-schedules the N tasks (one Epochal worker each, `cluster.worker`); they find each
other through the barrier context (`allGather`, once, at start) and then talk over their own TCP
links. The process that holds the SparkSession hosts the job master (`runtime.master.job_master`,
shared with the in-process executor) and, here, the workers' control links: the driver of a
classic session, the client of a Spark Connect session. Workers connect back to it, so under
Connect the executors must be able to reach the client (true for `local[*]` and for clients
inside the cluster's network); one that cannot fails the job at once, in one line.

On a Connect session, which has no RDDs, the stage is a DataFrame's `mapInArrow(...,
barrier=True)` over N one-row partitions, cancelled through a job tag (`interruptTag`); on a
classic session it stays an RDD's `barrier().mapPartitions`, cancelled through its job group:
the same worker function, and the RDD stage starts about 40 ms sooner (measured, interleaved:
submit → running 1.06 s against 1.09 s; relaunch recovery 2.7 s against 2.8 s, within noise).

The job master decides every restart; this host carries it out at one of two speeds:
- a task that raises leaves its process alive: the next *attempt* starts in place, every worker
  rebuilding its tasks from the checkpoint the job master picked, with no Spark work;
- a worker process that dies (SIGKILL, OOM) or a lost executor fails the barrier stage, which
  Spark never retries for a result stage: the host cancels what is left and submits a new stage
  (a new *launch*), whose workers start the next attempt.
The host numbers launches and the job master attempts, since a rerun Spark task cannot tell that
it is a retry. Submitting a stage, accepting its workers, supervising them and relaunching share one piece
of state (the launch, its links and the attempt) and stay here, about 475 lines (past the 450 we
aim for: cutting the stage host in two would pass that state between the halves); what does not
is in modules of its own: what a stage's task runs and the reading of its failures
(`cluster.stage_task`), the session, its master, task slots and the address workers reach
(`cluster.session`), the worker, the wire protocol. The job master is built, and runs its start
checks, before the SparkSession is (`cluster.session`), so a job that cannot start fails before
the JVM does.
"""

from __future__ import annotations

import logging
import pickle
import selectors
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from ..errors import EpochalError
from ..plan.job_graph import JobGraph, TaskId
from ..runtime.clock import WallClock
from ..runtime.master.attempt import Attempt
from ..runtime.master.command_desk import RescaleByRestore
from ..runtime.master.control import JobControl
from ..runtime.master.job_master import JobMaster
from ..runtime.metrics import TaskMetrics
from ..runtime.result import JobProgress, JobResult
from ..runtime.wire.network import CONTROL, Link, LinkClosed, read_object_blocking
from ..state.backups import holders
from ..state.keygroups import RoutingTable
from .protocol import (
    CaughtUp,
    FromTask,
    Hello,
    JobMasterUnreachable,
    PeerLost,
    Peers,
    Progress,
    Rejoin,
    Running,
    Start,
    Stop,
    ToTask,
    WorkerFailed,
)
from .session import BIND_HOST_ENV, bind_host, default_session, is_connect, master_of, wait_for_slots
from .session import create_session as create_session  # re-exported: tests and benchmarks import it here
from .stage_task import describe_failure, raised_in_task, unreachable_in, worker_function
from .worker import worker_of

log = logging.getLogger(__name__)

_HELLO_TIMEOUT = 300.0
_STAGE_SCHEMA = "worker int"


@dataclass(slots=True)
class _Launch:
    """One submitted barrier stage and the thread waiting for it."""

    number: int
    tag: str
    thread: threading.Thread
    error: list[BaseException] = field(default_factory=list)

    @property
    def is_done(self) -> bool:
        return not self.thread.is_alive()


def _spark_pickle(obj: Any) -> bytes:
    """`obj` pickled as the stage ships it to its workers (pyspark imported only when a check asks)."""
    from pyspark import cloudpickle

    data: bytes = cloudpickle.dumps(obj)
    return data


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


class SparkExecutor:
    """Runs a job graph on Spark: one barrier stage, a worker per task slot.

    Args:
        spark: the SparkSession to use, classic or Spark Connect; None creates (or reuses) the
            embedded local one.
        bind_host: the address the job master listens on for its workers; defaults to
            `EPOCHAL_BIND_HOST`, else `spark.driver.host` on a classic session, else (Connect)
            this machine's address on the route to the Connect server.
    """

    def __init__(
        self,
        spark: Any = None,
        bind_host: str | None = None,
        progress: Callable[[JobProgress], None] | None = None,
    ) -> None:
        self.spark = spark
        self.bind_host = bind_host
        self.progress = progress
        self.recovery_seconds: list[float] = []  # failure noticed → every worker running again
        self.worker_pids: dict[int, int] = {}  # worker index → its process (the newest incarnation)
        self.supervisor_pids: dict[int, int] = {}  # worker index → its Spark task's process
        self.local_restore_bytes: list[int] = []  # per attempt: restored from backups' copies
        self.recovery_tables: list[RoutingTable] = []  # parallel recoveries' restore tables
        self.timeline: list[tuple[str, float]] = []  # (event, time.monotonic()) for benchmarks
        self.task_started: dict[int, float] = {}  # worker → when its Spark task began (wall clock)
        self.survivor_recoveries: list[tuple[list[int], int]] = []  # (lost workers, restored checkpoint)

    def execute(
        self, job: JobGraph, from_checkpoint: str | int | None = None, control: JobControl | None = None,
        recompile: Callable[[int], JobGraph] | None = None,
    ) -> JobResult:
        """Run `job` in one barrier stage to its end.

        `recompile(n)`: the job at parallelism `n`; given it, a rescale within the stage's workers
        (`JobConfig.max_workers`) happens in place: the tasks restart in the running stage from
        the rescale's checkpoint. Without it, or beyond them, the host leaves by `RescaleByRestore`.
        """
        workers = max(max(v.parallelism for v in job.vertices), job.config.max_workers or 0)
        # first the job master's start checks (sources, every operator pickles, sinks, checkpoints):
        # before Spark starts
        self.timeline.append(("execute", time.monotonic()))
        master = JobMaster(job, WallClock(), from_checkpoint, self.progress, control, ships=_spark_pickle)
        self.timeline.append(("checked", time.monotonic()))
        spark = self.spark or default_session(workers)
        self.timeline.append(("session", time.monotonic()))
        slots = wait_for_slots(spark, workers)
        if slots is None:
            log.warning("cannot tell the task slots of %s; Spark checks them when the stage starts", master_of(spark))
        elif workers > slots:
            raise EpochalError(
                f"job {job.name!r} needs {workers} task slots for its workers but the cluster "
                f"({master_of(spark)}) has {slots}; lower the parallelism or add executors/cores"
            )
        master.control.task_slots = slots  # a rescale beyond them is refused, not launched
        host = self.bind_host or bind_host(spark)
        return _StageHost(master, spark, workers, host, self, recompile).run()


class _StageHost:
    """The job master's side of one job on Spark: launches, workers' links, and message routing."""

    def __init__(
        self, master: JobMaster, spark: Any, workers: int, host: str, executor: SparkExecutor,
        recompile: Callable[[int], JobGraph] | None = None,
    ) -> None:
        self.master = master
        self.recompile = recompile
        self.job = master.job
        self.spark = spark
        self.connect = is_connect(spark)
        self.workers = workers
        self.server = socket.create_server((host, 0), backlog=max(8, workers * 2))
        self.address = (host, self.server.getsockname()[1])
        self.selector = selectors.DefaultSelector()
        self.links: dict[int, Link] = {}
        self.addresses: dict[int, tuple[str, int]] = {}  # where each worker's task listens (`Peers`)
        self.incarnations = [0] * workers  # of each worker's process in this launch
        self.launches = 0
        self.running: set[int] = set()
        self.local_bytes = 0  # this attempt's restore read from chained backups' copies
        self.attempt: Attempt | None = None
        self.failed_at: float | None = None
        self.executor = executor
        self.live: dict[TaskId, TaskMetrics | tuple[Any, ...]] = {}
        self.catching_up: set[int] = set()  # survivors dropping what restored workers send again
        self.recovering = False  # lost workers restore while the others run on

    # -- launches --------------------------------------------------------------------------------
    def _event(self, name: str) -> None:
        self.executor.timeline.append((name, time.monotonic()))

    def _submit(self) -> _Launch:
        from pyspark import InheritableThread

        self._event("submitted")
        self.launches += 1
        number = self.launches
        tag = f"epochal-{uuid.uuid4().hex[:8]}-{number}"
        fn = worker_function(self.job, self.workers, number, self.address)
        launch = _Launch(number, tag, None)  # type: ignore[arg-type]

        def body() -> None:
            try:
                self._run_stage(fn, tag, f"epochal {self.job.name} launch {number}")
            except BaseException as exc:  # noqa: BLE001 - reported to the job master
                launch.error.append(exc)

        launch.thread = InheritableThread(target=body, daemon=True, session=self.spark)
        launch.thread.start()
        return launch

    def _run_stage(self, fn: Callable[[Iterator[Any]], Iterator[Any]], tag: str, description: str) -> None:
        """One barrier stage of a task per worker, each running `fn`, cancellable by `tag`;
        returns when it ends. Connect: a DataFrame's `mapInArrow`, tagged (`interruptTag`).
        Classic: an RDD's `mapPartitions` in job group `tag` (`cancelJobGroup`), which starts
        about 40 ms sooner (no query to plan); the two are equally fast otherwise."""
        n = self.workers
        if self.connect:
            self.spark.addTag(tag)  # this thread's operations (the thread ends with the stage)
            self.spark.range(0, n, 1, n).mapInArrow(fn, _STAGE_SCHEMA, barrier=True).collect()
        else:
            sc = self.spark.sparkContext
            sc.setJobGroup(tag, description, interruptOnCancel=True)
            sc.parallelize(range(n), n).barrier().mapPartitions(fn).collect()

    def _cancel_stage(self, launch: _Launch) -> None:
        if self.connect:
            self.spark.interruptTag(launch.tag)
        else:
            self.spark.sparkContext.cancelJobGroup(launch.tag)

    def _accept_workers(self, launch: _Launch) -> None:
        """Wait for every worker of `launch` to say hello on the control port."""
        for link in self.links.values():
            self._drop(link)
        self.links, self.addresses = {}, {}
        self.executor.task_started.clear()
        self.incarnations = [0] * self.workers
        self.server.settimeout(0.05)
        deadline = time.monotonic() + _HELLO_TIMEOUT
        while len(self.links) < self.workers:
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
            hello = self._next_hello(launch)
            if hello is not None:
                self._add_worker(*hello)
        self._event("connected")
        if self.executor.task_started:  # when the first Spark task began, on this clock
            first = min(self.executor.task_started.values())
            self.executor.timeline.append(("task started", time.monotonic() - (time.time() - first)))

    def _next_hello(self, launch: _Launch) -> tuple[Hello, socket.socket] | None:
        """A worker process's `Hello` of `launch` on the control port, if one comes soon."""
        try:
            sock, _ = self.server.accept()
        except TimeoutError:
            return None
        try:
            _, hello = read_object_blocking(sock, timeout=30)
        except (OSError, ConnectionError):
            sock.close()
            return None
        if not isinstance(hello, Hello) or hello.launch != launch.number:
            sock.close()
            return None
        return hello, sock

    def _add_worker(self, hello: Hello, sock: socket.socket) -> None:
        old = self.links.pop(hello.worker, None)
        if old is not None:
            self._drop(old)
        link = Link(sock, f"worker {hello.worker}")
        self.links[hello.worker] = link
        self.incarnations[hello.worker] = hello.incarnation
        self.executor.worker_pids[hello.worker] = hello.pid
        self.executor.supervisor_pids[hello.worker] = hello.supervisor
        self.selector.register(link, selectors.EVENT_READ, hello.worker)
        if hello.task_started:
            self.executor.task_started[hello.worker] = hello.task_started
        if hello.address is not None:
            known = len(self.addresses) == self.workers  # all were: a replaced process
            self.addresses[hello.worker] = hello.address
            if len(self.addresses) == self.workers:  # the rendezvous: everyone learns everyone
                peers = Peers(tuple(self.addresses[w] for w in range(self.workers)))
                for worker in [hello.worker] if known else list(self.links):
                    try:
                        self.links[worker].send_object(peers)
                        self.links[worker].flush_blocking(5.0)
                    except LinkClosed:  # died since its hello: its replacement says hello again
                        pass
                if not known:
                    self._event("rendezvous")

    def _replace_workers(self, launch: _Launch, lost: set[int], cause: BaseException) -> None:
        """Worker processes died while their Spark tasks live on: wait for the processes their
        supervisors start in their place (`cluster.supervisor`), then restart the attempt in
        place, on them and on the other workers' running processes, with no new stage."""
        if self.failed_at is None:
            self.failed_at = time.monotonic()
        self._event("worker lost")
        survivors = self.job.config.recovery.survivors
        told: set[int] = set()
        deadline = time.monotonic() + _HELLO_TIMEOUT
        self.server.settimeout(0.05)
        while True:
            lost |= self._closed_links()
            if survivors and lost - told:  # the others run on, logging what they send the lost
                self._tell_survivors(lost - told)
                told |= lost
            for worker in lost:
                if worker in self.links and self.links[worker].closed:
                    self._drop(self.links.pop(worker))
            if all(w in self.links for w in lost):
                break
            if launch.is_done:
                raise WorkerLost(f"the Spark stage ended: {describe_failure(launch.error)}")
            if time.monotonic() > deadline:
                raise WorkerLost(f"workers {sorted(lost)} died and were not replaced in time")
            hello = self._next_hello(launch)
            if hello is not None and hello[0].incarnation > self.incarnations[hello[0].worker]:
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
                self.executor.recovery_tables.append(routing)
        self._start_attempt(routing=routing)

    def _tell_survivors(self, lost: set[int]) -> None:
        """Workers died: the survivors keep running (`runtime.master.survivors`); what the lost
        tasks would have acknowledged is aborted meanwhile."""
        self.master.worker_lost(lost)
        for worker, link in self.links.items():
            if worker not in lost and not link.closed:
                for dead in sorted(lost):
                    link.send_object(PeerLost(dead))

    def _restore_lost(self, lost: set[int], cause: BaseException) -> bool:
        """Restore only the lost workers' tasks, on their new processes; False where that is not
        sound (every task then rolls back)."""
        plan = self.master.recover_survivors(lost, self.workers, cause)
        if plan is None or self.attempt is None:
            return False
        attempt, incarnations = self.attempt.number, tuple(self.incarnations)
        self.running -= lost
        self.catching_up, self.recovering = set(self.links) - lost, True
        self.executor.survivor_recoveries.append((sorted(lost), plan.checkpoint_id))
        for worker, link in self.links.items():
            if worker in lost:
                link.send_object(Start(attempt, plan.checkpoint_id, None, incarnations))
            else:
                for dead in sorted(lost):
                    link.send_object(Rejoin(dead, attempt, plan.checkpoint_id, incarnations))
        return True

    def _closed_links(self) -> set[int]:
        """The workers whose control link closed (what they sent meanwhile is stale: dropped)."""
        closed = {w for w, link in self.links.items() if link.closed}
        for key, _ in self.selector.select(0):
            try:
                for _ in key.fileobj.receive():  # type: ignore[union-attr]
                    pass
            except LinkClosed:
                closed.add(key.data)
        return closed

    def _drop(self, link: Link) -> None:
        try:
            self.selector.unregister(link)
        except (KeyError, ValueError):
            pass
        link.close()

    def _stop_workers(self, launch: _Launch, cancel: bool) -> None:
        """Tell every worker to leave; cancel the Spark job too when the stage is being given up."""
        for link in self.links.values():
            try:
                link.send_object(Stop())
                link.flush_blocking(5.0)
            except LinkClosed:
                pass
        if cancel:
            self._cancel_stage(launch)
        launch.thread.join(timeout=60)
        for link in self.links.values():
            self._drop(link)
        self.links = {}
        if launch.error and not cancel:
            log.warning("the Spark stage ended with %s after the job finished", launch.error[0])

    # -- attempts --------------------------------------------------------------------------------
    def _start_attempt(self, job: bytes | None = None, routing: RoutingTable | None = None) -> None:
        self.running = set()
        self.local_bytes = 0
        self.live = {}
        self.attempt = self.master.start_attempt(self._send)
        restore = self.master.restore_from
        checkpoint = restore.checkpoint_id if restore is not None else None
        start = Start(self.attempt.number, checkpoint, job, tuple(self.incarnations), routing)
        for link in self.links.values():
            link.send_object(start)

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
        link = self.links.get(worker_of(task))
        if link is not None:
            link.send_object(ToTask(task, message))

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
            self.server.close()

    def _supervise(self, launch: _Launch) -> None:
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
            for worker, link in list(self.links.items()):
                try:
                    link.flush()
                except LinkClosed as exc:
                    self._replace_workers(launch, {worker}, WorkerLost(f"worker {worker} is gone ({exc})"))
                    break
            if launch.is_done:
                raise WorkerLost(f"the Spark stage ended: {describe_failure(launch.error)}")
            for key, _ in self.selector.select(0.01):
                ready: Link = key.fileobj  # type: ignore[assignment]
                try:
                    frames = list(ready.receive())
                except LinkClosed as exc:
                    self._replace_workers(launch, {key.data}, WorkerLost(f"worker {key.data} is gone ({exc})"))
                    break
                for kind, _, _, payload in frames:
                    if kind == CONTROL:
                        self._on_message(pickle.loads(payload))

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
                self.executor.local_restore_bytes.append(self.local_bytes)
                self.master.recovered()
                if self.failed_at is not None:
                    self.executor.recovery_seconds.append(time.monotonic() - self.failed_at)
                    self.failed_at = None
                self._caught_up(None)
        elif kind is CaughtUp:
            self._caught_up(message.worker)
        elif kind is WorkerFailed:
            error = message.error if isinstance(message.error, BaseException) else EpochalError(str(message.error))
            self._restart_in_place(error)

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
