"""Messages between the job master (Spark driver) and the workers (Spark barrier tasks).

The task-level messages of `runtime.wire.messages` travel inside `ToTask` / `FromTask`; the rest is
the hosting protocol: who is there, start, restart in place, stop.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..errors import EpochalError
from ..plan.job_graph import TaskId
from ..runtime.wire.handshake import Refusal
from ..state.keygroups import RoutingTable
from ..state.replay import EpochReplay


class JobMasterUnreachable(EpochalError):
    """The Spark workers cannot connect back to the job master: relaunching would not help.

    A worker raises it in its Spark task (the message starts with `UNREACHABLE`); the driver reads
    it back from the stage's failure and raises it to the caller."""


def worker_of(task: TaskId) -> int:
    """The worker that hosts `task`: subtask i of every vertex runs on worker i."""
    return task.subtask


@dataclass(frozen=True, slots=True)
class Hello:
    """First message of a worker's process: its index in the barrier stage, its launch, and its
    incarnation there (0, then one more for each process its task's supervisor replaced)."""

    worker: int
    launch: int
    pid: int
    incarnation: int = 0
    supervisor: int = 0  # the Spark task's process, which outlives the worker's
    address: tuple[str, int] | None = None  # where its task listens for its peers
    # wall-clock times its Spark task began (the job graph loaded) and said hello, for the
    # start-up's breakdown (`SparkExecutor.timeline`)
    task_started: float = 0.0
    listening: str = ""  # host:port of its data port (shown in the job's status)


@dataclass(frozen=True, slots=True)
class Peers:
    """The answer to every `Hello`, once every worker of the launch said it: where each worker's
    task listens, by index. The rendezvous goes through the job master's own link (about a
    millisecond) instead of the barrier context's `allGather` (about a second: the JVM polls)."""

    addresses: tuple[tuple[str, int], ...]


@dataclass(frozen=True, slots=True)
class Start:
    """Build the tasks of `attempt`, restoring from checkpoint `checkpoint_id` if not None.

    `job`: a new job graph (cloudpickled: it holds user functions) for a rescale in place; the
    worker hosts its subtasks from now on. None: the same job as before. `incarnations`: each
    worker's process the attempt runs on (`cluster.peers`); empty: the ones linked now.
    """

    attempt: int
    checkpoint_id: int | None
    job: bytes | None = None
    incarnations: tuple[int, ...] = ()
    routing: RoutingTable | None = None  # in place of the checkpoint's: a parallel recovery's
    replay: EpochReplay | None = None  # epochs after the checkpoint replayed at their cuts (`state.replay`)


@dataclass(frozen=True, slots=True)
class PeerLost:
    """Worker `worker`'s process died: survivors keep running, logging what they send it
    (`cluster.survivors`), until a `Rejoin` names its new process."""

    worker: int


@dataclass(frozen=True, slots=True)
class Rejoin:
    """Worker `worker`'s new process restores checkpoint `checkpoint_id` (of attempt `attempt`,
    which goes on): link to it, replay to it what was sent after that checkpoint's barrier, and
    drop what it sends again (`runtime.master.survivors`)."""

    worker: int
    attempt: int
    checkpoint_id: int
    incarnations: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class CaughtUp:
    """This survivor dropped every record restored workers sent again: checkpoints may go on."""

    worker: int
    attempt: int


@dataclass(frozen=True, slots=True)
class Stop:
    """Leave: the job finished, failed for good, or is being relaunched."""


@dataclass(frozen=True, slots=True)
class Running:
    """The worker's tasks of `attempt` are open and restored: records flow again.
    `local_bytes`: what the restore read from chained backups' copies instead of storage."""

    worker: int
    attempt: int
    local_bytes: int = 0


@dataclass(frozen=True, slots=True)
class Progress:
    """Per-task metrics of one worker (`TaskMetrics`), sent about once a second for live metrics."""

    worker: int
    attempt: int
    tasks: tuple[tuple[TaskId, Any], ...]


@dataclass(frozen=True, slots=True)
class ToTask:
    task: TaskId
    message: Any


@dataclass(frozen=True, slots=True)
class FromTask:
    attempt: int
    message: Any


@dataclass(frozen=True, slots=True)
class WorkerFailed:
    """A task raised; the worker stopped its tasks and waits for a `Start` or a `Stop`."""

    worker: int
    attempt: int
    error: Any  # the exception when it pickles, else its text


@dataclass(frozen=True, slots=True)
class LinkRefused:
    """The worker closed a connection to its port that did not authenticate (the job master
    counts it in the job's metrics)."""

    worker: int
    refusal: Refusal


@dataclass(frozen=True, slots=True)
class LinkBroken:
    """The worker's link to `peer` (its process `incarnation`) broke while `attempt` ran (the
    network, or the peer's death)."""

    worker: int
    attempt: int
    peer: int
    reason: str
    incarnation: int = 0
