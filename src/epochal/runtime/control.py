"""Job control: the one place where a running job's status is published and commands wait.

The job master runs on the host's thread (the in-process loop, the Spark driver's receive
loop); a `JobHandle`, the control endpoint and the CLI run on other threads. `JobControl` is
the mailbox between them: the job master publishes a `JobStatus` whenever something a reader
cares about changes, and polls for commands between steps. Nothing else is shared, so the
job master never takes a lock on its hot path.

Commands are requests, not interrupts: a cancel stops the current attempt the next time the
host's loop looks (within one scheduling step on the in-process executor, one receive timeout on
Spark), and the job ends `CANCELLED` without committing the epoch in flight (its sinks' staged
output is discarded as after any failure; dissertation §4.1.3.1).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from enum import Enum


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

    def __init__(self, job: str, parallelism: int) -> None:
        self._lock = threading.Lock()
        self._status = JobStatus(job, JobState.CREATED, parallelism)
        self._changed = threading.Condition(self._lock)
        self._cancel = threading.Event()
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
        for watcher in self._watchers:
            watcher(status)

    @property
    def cancel_requested(self) -> bool:
        return self._cancel.is_set()

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

    def wait_final(self, timeout: float | None = None) -> JobStatus:
        """Block until the job reached a final state (or `timeout` passed); the status then."""
        with self._changed:
            self._changed.wait_for(lambda: self._status.state.is_final, timeout)
            return self._status
