"""What the Spark host measured and learnt while it ran a job, for tests, benchmarks and the
start-up's breakdown: `SparkExecutor` keeps these across its runs (it is a `StageRecords`), and
its stage host (`cluster.stage_host`) records into them as a launch starts, workers say hello,
fail and recover.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from ..state.keygroups import RoutingTable
from .protocol import Hello


@dataclass(eq=False, repr=False)  # an executor, which is one, keeps its identity
class StageRecords:
    """The host's records of one executor's runs."""

    recovery_seconds: list[float] = field(default_factory=list)  # failure noticed → every worker running again
    worker_pids: dict[int, int] = field(default_factory=dict)  # worker index → its process (the newest incarnation)
    supervisor_pids: dict[int, int] = field(default_factory=dict)  # worker index → its Spark task's process
    local_restore_bytes: list[int] = field(default_factory=list)  # per attempt: restored from backups' copies
    recovery_tables: list[RoutingTable] = field(default_factory=list)  # parallel recoveries' restore tables
    timeline: list[tuple[str, float]] = field(default_factory=list)  # (event, time.monotonic()) for benchmarks
    task_started: dict[int, float] = field(default_factory=dict)  # worker → when its Spark task began (wall clock)
    survivor_recoveries: list[tuple[list[int], int]] = field(default_factory=list)  # (lost, checkpoint restored)

    def event(self, name: str) -> None:
        self.timeline.append((name, time.monotonic()))

    def launched(self) -> None:
        """A new stage: none of its tasks has begun."""
        self.task_started.clear()

    def said_hello(self, hello: Hello) -> None:
        """A worker's process said hello: its process, its supervisor's, when its task began."""
        self.worker_pids[hello.worker] = hello.pid
        self.supervisor_pids[hello.worker] = hello.supervisor
        if hello.task_started:
            self.task_started[hello.worker] = hello.task_started

    def connected(self) -> None:
        """Every worker said hello: when the first Spark task began, on the timeline's clock."""
        self.event("connected")
        if self.task_started:
            first = min(self.task_started.values())
            self.timeline.append(("task started", time.monotonic() - (time.time() - first)))

    def running_again(self, local_bytes: int, failed_at: float | None) -> None:
        """Every worker runs the attempt: what it restored from backups' copies and, after a
        failure noticed at `failed_at`, how long the recovery took."""
        self.local_restore_bytes.append(local_bytes)
        if failed_at is not None:
            self.recovery_seconds.append(time.monotonic() - failed_at)
