"""Control messages between tasks and the job master.

Plain frozen records, so that the same protocol runs through a queue in one process or over TCP
between Spark workers and the driver. Named for the dissertation's epoch commit (§4.1.3):
trigger = prepare (1a), acknowledge = prepared (1c), notify-complete = commit (2a).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ...plan.job_graph import TaskId
from ...state.keygroups import RoutingTable
from ...state.manifest import FileHandle, Manifest, SubtaskState, TaskCheckpointStats
from .elements import Alignment


# job master → task ---------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class TriggerCheckpoint:
    """Start checkpoint `checkpoint_id` here: sent to sources and to tasks whose inputs ended."""

    checkpoint_id: int
    timestamp: float
    is_final: bool = False
    synchronous: bool = False  # halt after the barrier until the checkpoint ends
    completed: int = 0  # the newest complete checkpoint at trigger time (see TaskCheckpoints.fix_state)
    alignment: Alignment = Alignment.ALIGNED  # what the sources' barriers ask of every task
    reroute: RoutingTable | None = None  # key groups move at this checkpoint (`runtime.master.migrations`)
    patch: int = 0  # the newest live logic patch in effect from this checkpoint's barrier on


@dataclass(frozen=True, slots=True)
class StagePatch:
    """Load operator `uid`'s new function (pickled in `payload`) and check it, but run the old
    one until a barrier carries patch `patch_id` (`runtime.patches`)."""

    patch_id: int
    uid: str
    payload: bytes


@dataclass(frozen=True, slots=True)
class ResizePool:
    """Run operator `uid`'s function in `processes` processes from the next batch on
    (`runtime.operators.function_pool`)."""

    uid: str
    processes: int


@dataclass(frozen=True, slots=True)
class PoolResized:
    """Operator `uid`'s function pool at `task` runs `processes` processes, every one of them with
    the function loaded (the answer to `ResizePool`, `runtime.task.pool_reports`)."""

    task: TaskId
    uid: str
    processes: int


@dataclass(frozen=True, slots=True)
class DropPatch:
    """Forget staged patch `patch_id`: another subtask refused it."""

    patch_id: int


@dataclass(frozen=True, slots=True)
class NotifyCheckpointAborted:
    """Checkpoint `checkpoint_id` was aborted: sources halted for it resume."""

    checkpoint_id: int


@dataclass(frozen=True, slots=True)
class NotifyCheckpointComplete:
    """Checkpoint `checkpoint_id` is complete: commit its side effects."""

    checkpoint_id: int
    is_final: bool = False


@dataclass(frozen=True, slots=True)
class EndLoop:
    """Every head of the loop saw a clean probe round: the loop is empty, end its input."""


@dataclass(frozen=True, slots=True)
class QueryState:
    """Answer with the live state of `key` in operator `uid` (a live state query)."""

    query: int
    uid: str
    key: Any


@dataclass(frozen=True, slots=True)
class AssignSplits:
    """Read these splits too: the enumerator of source `uid` found them (`runtime.master.enumerator`)."""

    uid: str
    splits: tuple[Any, ...]
    # each split's index in the log, when every subtask is sent every split and keeps its own
    # (`runtime.splits`: the owner rule follows the readers a live rescale changes)
    indices: tuple[int, ...] = ()


# task → job master ---------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class PatchStaged:
    """Patch `patch_id` is staged at `task`, or refused there (`error`: why)."""

    task: TaskId
    patch_id: int
    error: str | None = None


@dataclass(frozen=True, slots=True)
class LoopRoundEnded:
    """A loop head's termination probe came back round `round`; `clean` if nothing moved."""

    task: TaskId
    round: int
    clean: bool

@dataclass(frozen=True, slots=True)
class OperatorSubtaskState:
    uid: str
    state: SubtaskState


@dataclass(frozen=True, slots=True)
class AcknowledgeCheckpoint:
    """A task's part of a checkpoint is durable (pre-committed)."""

    task: TaskId
    checkpoint_id: int
    states: tuple[OperatorSubtaskState, ...]
    stats: TaskCheckpointStats
    merged: tuple[FileHandle, ...] = ()  # the merged files its segments live in, whole (`state.merged_files`)
    counts: tuple[OperatorMetrics, ...] = ()  # the task's counts when it fixed its state (`job_counts`)


@dataclass(frozen=True, slots=True)
class DeclineCheckpoint:
    """A task cannot complete its part of a checkpoint (it was abandoned, or storage failed)."""

    task: TaskId
    checkpoint_id: int
    reason: str


@dataclass(frozen=True, slots=True)
class InputsEnded:
    """Every input of the task has ended; it now waits for the final checkpoint. With
    `in_flight`, async I/O requests are still to leave it: trigger it directly, but the job is
    not over until the same task says so again without."""

    task: TaskId
    in_flight: bool = False


@dataclass(frozen=True, slots=True)
class OperatorMetrics:
    """Records into and out of one operator (summed over the subtasks that report), the records
    a window operator found too late for their windows, and the records the operator's code
    failed on and `on_error="skip"` dropped."""

    name: str
    records_in: int
    records_out: int
    late_records: int = 0
    skipped_records: int = 0


@dataclass(frozen=True, slots=True)
class TaskFinished:
    task: TaskId
    metrics: tuple[OperatorMetrics, ...]


@dataclass(frozen=True, slots=True)
class TaskFailed:
    task: TaskId
    error: Any


@dataclass(frozen=True, slots=True)
class StateAnswer:
    """The answer to `QueryState` `query`: the key's values by state name, or why there are none."""

    task: TaskId
    query: int
    values: dict[str, Any]
    error: str | None = None


@dataclass(frozen=True, slots=True)
class AdoptKeyGroups:
    """Checkpoint `manifest` moved key groups to this task: read their state from it, and go on
    (`runtime.master.migrations`). It may hold only the old owners' part of a checkpoint still under way."""

    manifest: Manifest


@dataclass(frozen=True, slots=True)
class PrepareKeyGroups:
    """Key groups will move to this task by `table`: read them ahead from checkpoint `manifest`
    (pre-copy), off the processing path, and say when done (`runtime.master.migrations`)."""

    manifest: Manifest
    table: RoutingTable


@dataclass(frozen=True, slots=True)
class KeyGroupsPrepared:
    """A task read ahead the key groups it will take over, from checkpoint `checkpoint_id`
    (`read` False: it could not, e.g. retention removed a file meanwhile)."""

    task: TaskId
    checkpoint_id: int
    read: bool = True


@dataclass(frozen=True, slots=True)
class KeyGroupsAdopted:
    """A task took over the key groups checkpoint `checkpoint_id` moved to it."""

    task: TaskId
    checkpoint_id: int


@dataclass(frozen=True, slots=True)
class AdoptSplits:
    """Checkpoint `manifest` handed source splits to this task in a live rescale: take their
    positions from it, and read them (`runtime.splits`)."""

    manifest: Manifest


@dataclass(frozen=True, slots=True)
class NoMoreSplits:
    """No split will be handed to this source task any more: it ends once its own are read
    (`runtime.master.split_handovers`; Flink's NoMoreSplitsEvent)."""

    uid: str
