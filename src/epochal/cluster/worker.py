"""An Epochal worker: one process, one event loop, hosting some subtasks of every vertex.

Subtask `i` of each vertex runs on worker `i`; a worker beyond the parallelism (a *standby slot*,
`StreamEnvironment(max_workers=...)`) hosts none until a rescale in place gives it some (a
`Start` with a new job graph). Tasks on the same worker talk through local
queues; tasks on different workers through `runtime.wire.network` links with credit-based flow
control. The loop alternates between socket I/O (a selector), stepping runnable tasks, and
flushing output batches whose timeout expired. Async I/O (`map_async`) runs on an asyncio loop
that this loop pumps (`runtime.aio`): its descriptor sits in the selector beside the sockets,
and its next timer bounds the wait, so awaiting never blocks a task. Snapshot uploads run on a background thread
(the asynchronous part of ABS, dissertation §4.5); their acknowledgements are handed back
to the loop through a queue.

A task that raises does not end the process: the worker reports it and waits for the job
master to `Start` the next attempt (restoring a checkpoint, in place) or `Stop`.

Its link to the job master is a `DriverLink` (`cluster.driver_link`): a worker that cannot
connect, or a job master that does not prove it knows the job's secret, fails the Spark task with
`JobMasterUnreachable` (its message starts with `UNREACHABLE`), which the host reads in the
stage's error and ends the job in one line instead of relaunching. Its peers' frames go to the
attempt's channels through a `FrameRouter` (`cluster.frame_router`). Connections to the worker's
port that fail the handshake are refused (`cluster.peers`) and reported (`LinkRefused`); a link
to a peer that breaks is reported too (`LinkBroken`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
import os
import pickle
import selectors
import socket
import time
from typing import Any

from ..plan.job_graph import JobGraph, TaskId
from ..runtime import aio
from ..runtime.clock import WallClock
from ..runtime.task.file_merging import SnapshotMerger
from ..runtime.task.setup import TaskState
from ..runtime.task.task import Task
from ..runtime.task.wiring import build_tasks, channel_keys, merger_for
from ..runtime.wire.messages import AcknowledgeCheckpoint, NotifyCheckpointComplete
from ..runtime.wire.network import CONTROL, Link, LinkClosed
from ..state.storage import CheckpointStorage
from .backups import WorkerBackups
from .driver_link import DriverLink
from .frame_router import FLUSH_INTERVAL, FrameRouter
from .link_guard import LinkGuard
from .peers import LISTENER, PeerLinks
from .protocol import Hello, LinkBroken, LinkRefused, Progress, Running, Start, Stop, ToTask, WorkerFailed, worker_of
from .snapshot_thread import SnapshotThread
from .survivors import SurvivorChannels

log = logging.getLogger(__name__)

WAKEUP = "wakeup"  # the selector key's data for the snapshot thread's wake-up socket
ASYNC_LOOP = "async"  # the selector key's data for the asyncio loop's descriptor (`runtime.aio`)
_TIME_SLICE = 0.005  # seconds of task steps between two looks at the sockets


class Worker:
    """Hosts the tasks of one worker index for the lifetime of one Spark launch."""

    def __init__(
        self,
        job: JobGraph,
        index: int,
        num_workers: int,
        launch: int,
        driver: tuple[str, int],
        listener: socket.socket,
        address: tuple[str, int],
        incarnation: int = 0,
        task_started: float = 0.0,
        guard: LinkGuard | None = None,
    ) -> None:
        if guard is None:
            raise TypeError("a worker needs the job's LinkGuard (its secret)")
        self.guard = guard
        self.job = job
        self.index = index
        self.num_workers = num_workers
        self.launch = launch
        self.incarnation = incarnation
        self.config = job.config
        every = job.config.metrics_interval  # live metrics to the job master; None: none
        self._report_every = math.inf if every is None else every
        config = job.config.checkpoint
        self.storage = CheckpointStorage(config.directory, filesystem=config.filesystem) if config.directory else None
        replicas = job.config.state.backup_replicas
        self.backups = (
            WorkerBackups(index, num_workers, replicas, config.retain, self.storage)
            if replicas and self.storage is not None and num_workers > 1 else None
        )
        self.clock = WallClock()
        self.background = SnapshotThread()
        self.selector = selectors.DefaultSelector()
        self.selector.register(self.background.wakeup, selectors.EVENT_READ, WAKEUP)
        self.address = address  # where this worker's task listens for its peers
        self.task_started = task_started
        self.peers = PeerLinks(index, num_workers, launch, incarnation, listener, (), self.selector, guard)
        self.links = self.peers.links  # peer worker → link
        self.driver = DriverLink(driver, guard)
        self.pending: Start | None = None  # a Start waiting for links to a new peer incarnation
        self.held: list[ToTask] = []  # what came for the pending Start's tasks, not built yet
        self.tasks: dict[TaskId, Task] = {}
        self.merger: SnapshotMerger | None = None  # this worker's one checkpoint file per checkpoint
        self.failed = False
        self.stopped = False
        self.keys = channel_keys(job)
        self._last_progress = 0.0
        self._async_fd: int | None = None  # the asyncio loop's descriptor, once in the selector
        # channels to other workers that log and count, when survivors do not roll back
        self.survivors = SurvivorChannels(index, job.config.recovery.survivors, self._to_driver)
        self.frames = FrameRouter(index, self.survivors, self.backups)  # peers' frames to the channels

    @property
    def attempt(self) -> int:
        """The attempt this worker runs (its frame router drops frames of older ones)."""
        return self.frames.attempt

    # -- set-up ----------------------------------------------------------------------------------
    def connect(self) -> None:
        """Connect to the driver and, at launch, to every peer (lower index accepts, higher
        connects); a later incarnation makes its peer links when its first `Start` names them."""
        host, port = self.peers.listener.getsockname()[:2]
        hello = Hello(self.index, self.launch, os.getpid(), self.incarnation, os.getppid(), self.address,
                      self.task_started, f"{host}:{port}")
        link, self.peers.addresses = self.driver.connect(hello)
        self.selector.register(link, selectors.EVENT_READ, "driver")
        if self.incarnation == 0:
            self.peers.connect_all()
        else:
            self.peers.listen()

    def _on_start(self, start: Start) -> None:
        """Stop the attempt running now; build `start`'s once every peer link joins the
        incarnations it names (at once, unless a peer was replaced)."""
        self._close_tasks()
        self.peers.repair(start.incarnations)
        self.pending, self.held = start, []
        self._start_when_linked()

    def _start_when_linked(self) -> None:
        if self.pending is not None and self.peers.ready(self.pending.incarnations):
            start, self.pending = self.pending, None
            self._start(start)
            held, self.held = self.held, []
            for message in held:  # a checkpoint's trigger, say, sent right after the Start
                self._to_task(message)

    def _start(self, start: Start) -> None:
        """(Re)build this worker's tasks for an attempt, restoring from a checkpoint; a new job
        graph (a rescale in place) may give it other subtasks, or none (a standby worker)."""
        self._close_tasks()
        if start.job is not None:
            self.job = pickle.loads(start.job)
            self.config = self.job.config
            self.keys = channel_keys(self.job)
        self.frames.begin(start.attempt)
        self.failed = False
        manifest = None
        if start.checkpoint_id is not None:
            assert self.storage is not None
            # Each file read below is checked against its checksum: a corrupt one fails the attempt,
            # and the job master then refuses that checkpoint.
            manifest = self.storage.load_manifest(start.checkpoint_id)
            if start.routing is not None:  # a parallel recovery's table (`runtime.master.recovery`)
                manifest = dataclasses.replace(manifest, routing=start.routing)
            if start.replay is not None:  # epochs replayed at their cuts after a fallback (`state.replay`)
                manifest = dataclasses.replace(manifest, replay=start.replay)
        read_before = self.backups.store.bytes_read if self.backups is not None else 0
        ends = self.frames.wire(self.job, self.keys, self.links, start.checkpoint_id)
        attempt_no = self.attempt
        mine = [t for t in self.job.task_ids() if worker_of(t) == self.index]
        send = self.driver.sender(attempt_no)
        self.merger = merger_for(self.job, self.storage, self.background, f"worker-{self.index}")
        self.tasks = build_tasks(self.job, mine, ends, self.clock, self.storage, manifest, send, self.background,
                                 self.merger)
        try:
            for task in self.tasks.values():
                task.open()
        except Exception as exc:
            self._fail(exc)
            return
        local = self.backups.store.bytes_read - read_before if self.backups is not None else 0
        self._to_driver(Running(self.index, attempt_no, local))
        self.frames.release()

    def _close_tasks(self) -> None:
        for task in self.tasks.values():
            task.close()
        self.tasks = {}
        if self.merger is not None:
            self.merger.close()
            self.merger = None

    def _fail(self, exc: BaseException) -> None:
        log.warning("worker %d: task failed: %s", self.index, exc)
        self.failed = True
        self._close_tasks()
        try:
            pickle.dumps(exc)
            error: Any = exc
        except Exception:
            error = f"{type(exc).__name__}: {exc}"
        self._to_driver(WorkerFailed(self.index, self.attempt, error))

    def _to_driver(self, message: Any) -> None:
        self.driver.send(message)

    # -- the loop --------------------------------------------------------------------------------
    def run(self) -> None:
        try:
            while not self.stopped:
                self._pump_async()
                busy = self._step_tasks()
                self._drain_outbox()
                now = time.monotonic()
                self.frames.flush_due(now)
                if now - self._last_progress >= self._report_every and self.tasks and not self.failed:
                    self._last_progress = now
                    metrics = tuple((t.id, t.task_metrics()) for t in self.tasks.values())
                    self._to_driver(Progress(self.index, self.attempt, metrics))
                self._flush_links()
                self._poll_io(0.0 if busy else self._idle_timeout())
                if self.peers.acceptor.pending and self.peers.acceptor.due(time.monotonic()):
                    self.peers.accept()  # closes the connections that did not prove themselves in time
        finally:
            self._close_tasks()
            with contextlib.suppress(KeyError, ValueError):
                self.selector.unregister(self.background.wakeup)
            driver = aio.existing_driver()
            if driver is not None:
                if self._async_fd is not None:
                    with contextlib.suppress(KeyError, ValueError):
                        self.selector.unregister(self._async_fd)
                driver.close()
            self.background.shutdown()
            self.peers.close()
            self.driver.close()

    def _pump_async(self) -> None:
        """Run the asyncio loop's ready work (async I/O results), and watch its descriptor."""
        driver = aio.existing_driver()
        if driver is None:
            return
        fd = driver.fileno()
        if fd is not None and fd != self._async_fd:
            self.selector.register(fd, selectors.EVENT_READ, ASYNC_LOOP)
            self._async_fd = fd
        if driver.is_active:
            try:
                driver.pump()
            except Exception as exc:  # a callback of user code raised on the loop
                self._fail(exc)

    def _idle_timeout(self) -> float:
        timeout = 0.02
        driver = aio.active_driver()
        if driver is not None and (deadline := driver.next_deadline()) is not None:
            timeout = min(timeout, deadline)
        if self.frames.buffered():
            timeout = FLUSH_INTERVAL
        now = self.clock.now()
        for task in self.tasks.values():
            t = task.next_timer()
            if t is not None:
                timeout = min(timeout, max(0.0, t - now))
        return timeout

    def _step_tasks(self) -> bool:
        """Step runnable tasks round robin for one time slice, then go back to the sockets.

        The slice is short so that control messages (barrier triggers, commits, restarts) and
        credits are never stuck behind a slow operator for long.
        """
        busy = False
        deadline = time.perf_counter() + _TIME_SLICE
        try:
            self.background.run_done()  # finished snapshot writes, to their (open) tasks
            if self.failed:
                return False
            progressed = True
            while progressed and time.perf_counter() < deadline:
                progressed = False
                for task in list(self.tasks.values()):
                    if task.run_steps(until=deadline):
                        progressed = busy = True
        except Exception as exc:
            self._fail(exc)
            return False
        return busy

    def _drain_outbox(self) -> None:
        while self.peers.refused:
            self._to_driver(LinkRefused(self.index, self.peers.refused.pop(0)))
        if self.backups is not None:
            self.backups.ship(self.links)
        for message in self.driver.queued():
            if self.backups is not None and type(message.message) is AcknowledgeCheckpoint:
                self.backups.snapshotted(message.message, self.links)
            self._to_driver(message)

    def _flush_links(self) -> None:
        for link in [self.driver.link, *self.links.values()]:
            if link is None or link.closed or not link.wants_write:
                continue
            try:
                link.flush()
            except LinkClosed:
                pass  # the driver decides what a dead peer means
            events = selectors.EVENT_READ | (selectors.EVENT_WRITE if link.wants_write else 0)
            try:
                self.selector.modify(link, events, self.selector.get_key(link).data)
            except (KeyError, ValueError):
                pass

    def _poll_io(self, timeout: float) -> None:
        for key, mask in self.selector.select(timeout):
            if key.data == LISTENER:
                self.peers.accept()
                self._start_when_linked()
                self.survivors.linked(self.peers)
                continue
            if key.data == WAKEUP:  # a snapshot written or a read-ahead done: the next step hands it on
                self.background.clear_wakeups()
                continue
            if key.data == ASYNC_LOOP:  # the asyncio loop has I/O ready: the next round pumps it
                continue
            link: Link = key.fileobj  # type: ignore[assignment]
            if mask & selectors.EVENT_WRITE:
                try:
                    link.flush()
                except LinkClosed:
                    pass
            if mask & selectors.EVENT_READ:
                try:
                    for frame in link.receive():
                        if key.data == "driver":
                            self._on_control(frame)
                        else:
                            self.frames.on_frame(*frame)
                except LinkClosed as exc:
                    try:
                        self.selector.unregister(link)
                    except (KeyError, ValueError):
                        pass  # dropped already by an earlier event of this select (a peer's new incarnation)
                    if key.data == "driver":
                        log.warning("worker %d: lost the driver; leaving", self.index)
                        self.stopped = True
                    elif self.tasks and self.pending is None and self.links.get(key.data) is link:
                        # a peer's link broke: its process died (the job master sees that too), or
                        # the network dropped it; either way the attempt cannot go on without it
                        self.survivors.link_broke(link)
                        self._to_driver(LinkBroken(self.index, self.attempt, key.data, str(exc),
                                                   self.peers.incarnation_of(key.data)))

    def _on_control(self, frame: tuple[int, int, int, bytes]) -> None:
        kind, _, _, payload = frame
        if kind != CONTROL:
            return
        message = pickle.loads(payload)
        if type(message) is ToTask:
            if self.pending is not None:
                self.held.append(message)
            else:
                self._to_task(message)
        elif type(message) is Start:
            self._on_start(message)
        elif type(message) is Stop:
            self.stopped = True
        else:  # a lost peer's: the others run on (`cluster.survivors`)
            self.survivors.on_control(message, self.peers)

    def _to_task(self, message: ToTask) -> None:
        if type(message.message) is NotifyCheckpointComplete and self.survivors.enabled:
            self.survivors.completed(message.message.checkpoint_id)
        task = self.tasks.get(message.task)
        if task is not None and not self.failed:
            task.inbox.append(message.message)

    @property
    def all_finished(self) -> bool:
        return bool(self.tasks) and all(t.state is TaskState.FINISHED for t in self.tasks.values())
