"""Job control: the one place where a running job's status is published and commands wait.

The job master runs on the host's thread (the in-process loop, the Spark driver's receive
loop); a `JobHandle`, the control endpoint and the CLI run on other threads. `JobControl` is
the mailbox between them: the job master publishes a `JobStatus` whenever something a reader
cares about changes, and polls for commands between steps. Nothing else is shared, so the
job master never takes a lock on its hot path.

Commands (`runtime.commands`: typed requests with typed results) are requests, not interrupts:
the job master acts on them the next time the host's loop looks (within one scheduling step on
the in-process executor, one receive timeout on Spark), through its `CommandDesk`. A cancel ends
the job `CANCELLED` without committing the epoch in flight (its sinks' staged output is
discarded as after any failure; dissertation §4.1.3.1).
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from enum import Enum
from typing import TYPE_CHECKING, Any

from ...errors import EpochalError, NoCheckpointError
from ...state.reader import lookup, open_checkpoint
from ..commands import Command, Query, R, Ticket
from ..metrics import JobMetrics
from ..windowing.table_state import committed_windows

if TYPE_CHECKING:
    pass


class JobState(Enum):
    """Where a job is in its life; the last three are final."""

    CREATED = "created"
    RUNNING = "running"
    RESTARTING = "restarting"
    FINISHED = "finished"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def is_final(self) -> bool:
        """The job ended: nothing will change its state again."""
        return self in (JobState.FINISHED, JobState.FAILED, JobState.CANCELLED)


@dataclass(frozen=True, slots=True)
class JobStatus:
    """What `handle.status()`, `epochal status` and `GET /status` show."""

    job: str
    state: JobState
    parallelism: int
    attempt: int = 0
    restarts: int = 0
    last_checkpoint: int | None = None
    failures: tuple[str, ...] = field(default_factory=tuple)

    def to_json(self) -> dict[str, object]:
        """The status as JSON-ready values (the endpoint's `GET /status`)."""
        return {
            "job": self.job, "state": self.state.value, "parallelism": self.parallelism,
            "attempt": self.attempt, "restarts": self.restarts, "last_checkpoint": self.last_checkpoint,
            "failures": list(self.failures),
        }


class JobControl:
    """The thread-safe mailbox between a job master and whoever controls the job."""

    _metrics: JobMetrics | None = None  # the latest metrics snapshot (`publish_metrics`)

    def __init__(self, job: str, parallelism: int) -> None:
        self._lock = threading.Lock()
        self._status = JobStatus(job, JobState.CREATED, parallelism)
        self._changed = threading.Condition(self._lock)
        self._cancel = threading.Event()
        self.checkpoint_directory: str | None = None  # set by the job master: where state queries read
        self.task_slots: int | None = None  # set by a host that knows the cluster's: a rescale's ceiling
        self.web_url: str | None = None  # set by the control endpoint that serves this job
        self._commands: deque[Ticket[Any]] = deque()
        self._watchers: list[Callable[[JobStatus], None]] = []

    def watch(self, watcher: Callable[[JobStatus], None]) -> None:
        """Call `watcher` with every status published from now on, on the job master's thread."""
        self._watchers.append(watcher)

    # -- the job master's side --------------------------------------------------------------------
    def publish(self, **changes: object) -> None:
        """Replace fields of the status (`state=`, `attempt=`, ...) and wake who waits on it."""
        with self._changed:
            self._status = status = replace(self._status, **changes)  # type: ignore[arg-type]
            self._changed.notify_all()
            orphans = list(self._commands) if status.state.is_final else []
            if orphans:
                self._commands.clear()
        for ticket in orphans:  # nobody will take them any more
            ticket.fail(self._ended(ticket.command.kind))
        for watcher in self._watchers:
            watcher(status)

    @property
    def cancel_requested(self) -> bool:
        return self._cancel.is_set()

    def next_command(self) -> Ticket[Any] | None:
        """The oldest command not yet taken (a cheap check when there is none)."""
        if not self._commands:
            return None
        try:
            return self._commands.popleft()
        except IndexError:
            return None

    # -- the controller's side --------------------------------------------------------------------
    def status(self) -> JobStatus:
        with self._lock:
            return self._status

    def request_cancel(self) -> bool:
        """Ask the job to stop; False if it already ended."""
        if self.status().state.is_final:
            return False
        self._cancel.set()
        return True

    def query_state(self, operator: str, key: Any) -> tuple[int | None, dict[str, Any]]:
        """The committed state of `key` in operator uid `operator`: read from the job's last
        complete checkpoint (read-committed, as a sink's reader sees the job), by state name, with
        that checkpoint's id; `(None, {})` before the first. Runs on the caller's thread and reads
        only the key's key group, so it never slows the job.

        Raises:
            NoCheckpointError: the job has no checkpoint directory, or no such operator uid.
        """
        if self.checkpoint_directory is None:
            raise NoCheckpointError("state queries read the job's checkpoints: "
                                    "it needs CheckpointConfig(directory=...)")
        while True:
            checkpoint = self.status().last_checkpoint
            if checkpoint is None:
                return None, {}
            try:
                manifest = open_checkpoint(self.checkpoint_directory, checkpoint)
                return checkpoint, committed_windows(manifest, operator, key, lookup(manifest, operator, key))
            except NoCheckpointError:
                if self.status().last_checkpoint == checkpoint:  # not dropped by retention: the error is real
                    raise

    def query_live(self, operator: str, key: Any, timeout: float | None = 10.0) -> dict[str, Any]:
        """The live state of `key` in operator uid `operator`, by state name, as the subtask that
        owns the key holds it now (read-uncommitted: it may include records of an epoch that a
        failure would roll back); `{}` if the key has none. Answered between two of that task's
        batches, through the job master (`runtime.master.live_queries`).

        Raises:
            NoCheckpointError: no operator with that uid.
            EpochalError: the operator has no keyed state, or the job is not running.
            TimeoutError: no answer within `timeout` seconds.
        """
        return self.submit(Query(operator, key, live=True)).wait(timeout)

    def submit(self, command: Command[R]) -> Ticket[R]:
        """Queue a command for the job master; its ticket says when it is done and how."""
        ticket = Ticket(command)
        with self._lock:  # against `publish` of a final state: a command is taken, or refused
            ended = self._status.state.is_final
            if not ended:
                self._commands.append(ticket)
        if ended:
            ticket.fail(self._ended(command.kind))
        return ticket

    def _ended(self, kind: str) -> EpochalError:
        status = self._status
        if status.state is JobState.FAILED and status.failures:  # the cause, not only the consequence
            return EpochalError(f"job {status.job!r} failed ({status.failures[-1]}); nothing to {kind}")
        return EpochalError(f"job {status.job!r} has ended ({status.state.value}); nothing to {kind}")

    # -- metrics (runtime.metrics) ----------------------------------------------------------------
    def publish_metrics(self, metrics: JobMetrics) -> None:
        """The job master's newest metrics snapshot. One reference is swapped, without a lock:
        a reader gets the previous immutable snapshot or this one, never half of either."""
        self._metrics = metrics

    def metrics(self) -> JobMetrics | None:
        """The newest metrics snapshot; None until the job master published one."""
        return self._metrics

    def wait_final(self, timeout: float | None = None) -> JobStatus:
        """Block until the job reached a final state (or `timeout` passed); the status then."""
        with self._changed:
            self._changed.wait_for(lambda: self._status.state.is_final, timeout)
            return self._status
