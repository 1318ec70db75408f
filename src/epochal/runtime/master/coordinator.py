"""The checkpoint coordinator: triggers checkpoints, collects acknowledgements, commits.

Implements the job master's side of ABS (§4.2: the coordinator periodically injects barriers at
the sources) and of the dissertation's two-phase epoch commit (§4.1.3): a checkpoint is *pending*
until every task acknowledged its durable part (prepare), then *complete* once its manifest is
written, and only then are tasks told to commit (commit phase). Several checkpoints may be
pending (pipelined epochs); one that exceeds its timeout is aborted; a number of consecutive
failed checkpoints is tolerated (§4.5), and one more is reported to the failure manager (the
`on_failure` callback), which fails the attempt like a task's error.

Observers learn of completions and aborts through callbacks, so history and metrics live outside
the protocol.

Deviation (for bounded inputs): a task whose inputs have all ended can no longer receive
barriers, so the coordinator triggers it directly, like a source; once every task has ended,
a final checkpoint commits the last epoch and the job finishes.

After a fallback, an attempt first replays the refused epochs at their cuts (`state.replay`):
their checkpoints are triggered first, under their ids, one at a time; one that does not
complete fails the attempt (`ReplayedEpochs`, `master.replay`).

Its parts: a `PendingCheckpoint` (`pending_checkpoint`) collects one checkpoint's
acknowledgements and folds them into its manifest, listing the merged files its state lies in
(`MergedFiles`, `merged_files`: the coordinator's, kept as checkpoints complete).
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable
from typing import TypeVar

from ...config import CheckpointConfig
from ...errors import CheckpointError, ReplayAbandoned
from ...plan.job_graph import JobGraph, TaskId
from ...state.keygroups import RoutingTable
from ...state.manifest import Manifest, SplitLogState
from ...state.storage import CheckpointStorage
from ..checkpoints import AbortedCheckpoint, AbortReason, CompletedCheckpoint
from ..clock import Clock
from ..wire.elements import Alignment
from ..wire.messages import (
    AcknowledgeCheckpoint,
    DeclineCheckpoint,
    InputsEnded,
    NotifyCheckpointAborted,
    NotifyCheckpointComplete,
    TriggerCheckpoint,
)
from .enumerator import SplitEnumerators
from .job_counts import Base
from .merged_files import MergedFiles
from .patches import PatchLog
from .pending_checkpoint import AckResult, PendingCheckpoint
from .replay import ReplayedEpochs

log = logging.getLogger(__name__)


# how the barriers of a periodic checkpoint are aligned, by `CheckpointConfig.mode`
_ALIGNMENT = {"unaligned": Alignment.UNALIGNED, "at_least_once": Alignment.NONE}

Send = Callable[[TaskId, object], None]


def _ignore(_: object) -> None:
    pass


class CheckpointCoordinator:
    """Drives checkpoints for one attempt of a job.

    Args:
        job: the job graph; its config says when to checkpoint.
        storage: where manifests go; None keeps checkpoints only long enough to commit sinks.
        clock: the runtime's clock (virtual in replayable runs).
        send: delivers a message to a task.
        first_checkpoint_id: ids continue across restarts, so a new attempt never reuses one.
        on_completed: told of every completed checkpoint, after its manifest is written.
        on_aborted: told of every aborted checkpoint.
        on_failure: the failure manager, told once when more consecutive checkpoints failed than
            tolerated; the coordinator triggers nothing after that.
        enumerators: the split logs of sources that find splits as they run; the coordinator
            ticks them, and checkpoints them with every checkpoint (`runtime.master.enumerator`).
        patches: the live logic patches: barriers carry the newest, manifests record them, and
            the abort of a checkpoint that switched one fails the attempt (`master.patches`).
    """

    def __init__(
        self,
        job: JobGraph,
        storage: CheckpointStorage | None,
        clock: Clock,
        send: Send,
        first_checkpoint_id: int = 1,
        on_completed: Callable[[CompletedCheckpoint], None] = _ignore,
        on_aborted: Callable[[AbortedCheckpoint], None] = _ignore,
        on_failure: Callable[[CheckpointError], None] = _ignore,
        enumerators: SplitEnumerators | None = None,
        patches: PatchLog | None = None,
    ) -> None:
        self.job = job
        self.patches = patches
        self.enumerators = enumerators or None
        self.on_completed = on_completed
        self.on_aborted = on_aborted
        self.on_failure = on_failure
        self.is_stopped = False
        self.config: CheckpointConfig = job.config.checkpoint
        self.storage = storage
        self.clock = clock
        self.send = send
        self.tasks = job.task_ids()
        self.sources = {t for t in self.tasks if job.vertex(t.vertex).is_source}
        self.ended: set[TaskId] = set()
        self.in_flight: set[TaskId] = set()  # ended tasks whose async requests have not all left
        self.pending: dict[int, PendingCheckpoint] = {}
        # the latest completed and aborted checkpoints (the last _KEPT of each: a job runs for weeks)
        self.completed: list[CompletedCheckpoint] = []
        self.aborted: list[AbortedCheckpoint] = []
        self._recent: deque[int] = deque(maxlen=64)  # ids that ended, to recognise late acks
        self._next_id = first_checkpoint_id
        self._last_trigger = clock.now()
        self._last_completion = float("-inf")
        self._consecutive_failures = 0
        self.final_checkpoint: int | None = None
        self.final_completed = False
        self.routing: RoutingTable | None = None  # the table of the newest trigger (None: ranges)
        self.migrating: int | None = None  # a migration's checkpoint, until its groups are adopted
        self.replays = ReplayedEpochs()  # epochs replayed at their cuts, triggered first
        self.merged_files = MergedFiles()  # of the complete checkpoints a pending one may build on
        self.counts_base: Base = {}  # the whole job's counts at the restored checkpoint (`job_counts`)
        self.paused = False  # survivors drop what restored tasks send again (`master.survivors`)

    def replay(self, checkpoint_ids: tuple[int, ...]) -> None:
        self.replays = ReplayedEpochs(checkpoint_ids)

    def remember_merged(self, manifest: Manifest | None) -> None:
        """The merged files of a complete checkpoint (the restored one) that new ones may build on."""
        self.merged_files.remember(manifest)

    # -- triggering ------------------------------------------------------------------------------
    def _periodic_due(self, now: float) -> bool:
        c = self.config
        return (
            c.is_periodic
            and not self.is_stopped
            and self.final_checkpoint is None
            and self.migrating is None
            and not self.replays
            and not self.paused
            and len(self.pending) < c.max_concurrent
            and now - self._last_trigger >= c.interval  # type: ignore[operator]
            and now - self._last_completion >= c.min_pause
        )

    def next_deadline(self) -> float | None:
        """The next time `tick` has something to do (for a virtual clock with nothing to run)."""
        times = [p.triggered_at + self.config.timeout for p in self.pending.values()]
        if self.enumerators is not None and (discovery := self.enumerators.next_deadline()) is not None:
            times.append(discovery)
        if self.config.is_periodic and self.final_checkpoint is None:
            assert self.config.interval is not None
            times.append(
                max(self._last_trigger + self.config.interval, self._last_completion + self.config.min_pause)
            )
        return min(times) if times else None

    def tick(self) -> None:
        """Expire overdue checkpoints and trigger a periodic one if it is due."""
        if self.is_stopped:
            return
        now = self.clock.now()
        if self.enumerators is not None:
            self.enumerators.tick(now)
        for pending in list(self.pending.values()):
            if now - pending.triggered_at >= self.config.timeout:
                self._abort(pending, AbortReason.EXPIRED, f"not complete after {self.config.timeout}s")
                if self.is_stopped:  # the failure manager was told: the attempt is over
                    return
        if self.replays and not self.pending and self.final_checkpoint is None:
            self.trigger(aligned=True)  # the next replayed epoch: its sources hold its barrier until the cut
        elif self._periodic_due(now):
            self.trigger()

    def trigger(self, is_final: bool = False, aligned: bool = False, reroute: RoutingTable | None = None) -> int:
        """Start a checkpoint at the sources (and at every task whose inputs ended).

        `aligned`: align its barriers whatever the mode (a savepoint, a rescale's checkpoint:
        they restore at any parallelism, and exactly once). `reroute`: key groups move to this
        routing table at the checkpoint (`runtime.master.migrations`; always aligned); no other
        checkpoint starts until the job master says the moved groups were adopted (`migrated`)."""
        cpu = time.thread_time()
        if self.replays:
            checkpoint_id = self.replays.next()
        else:
            checkpoint_id = self._next_id
            self._next_id += 1
        if reroute is not None:
            self.routing, self.migrating, aligned = reroute, checkpoint_id, True
        now = self.clock.now()
        self._last_trigger = now
        completed = self.completed[-1].checkpoint_id if self.completed else 0
        # splits found so far go out ahead of the trigger, so this checkpoint covers them
        marks = self.enumerators.mark() if self.enumerators is not None else {}
        patch = self.patches.switch_id if self.patches is not None else 0
        self.pending[checkpoint_id] = PendingCheckpoint(
            checkpoint_id, now, time.perf_counter(), is_final, set(self.tasks), completed, split_marks=marks,
            routing=self.routing, reroutes=reroute is not None, merged_files=self.merged_files, patch=patch,
        )
        mode = self.config.mode
        alignment = Alignment.ALIGNED if aligned else _ALIGNMENT.get(mode, Alignment.ALIGNED)
        message = TriggerCheckpoint(checkpoint_id, now, is_final, mode == "synchronous", completed, alignment, reroute,
                                    patch)
        for task in self.tasks:
            if task in self.sources or task in self.ended:
                self.send(task, message)
        if is_final:
            self.final_checkpoint = checkpoint_id
        self.pending[checkpoint_id].cpu_s += time.thread_time() - cpu
        return checkpoint_id

    # -- messages from tasks ---------------------------------------------------------------------
    def on_inputs_ended(self, message: InputsEnded) -> None:
        (self.in_flight.add if message.in_flight else self.in_flight.discard)(message.task)
        self.ended.add(message.task)
        if self.is_stopped:
            return
        # It will see no more barriers: checkpoints already under way are triggered here directly.
        for pending in self.pending.values():
            if message.task in pending.awaiting and message.task not in self.sources:
                completed = self.completed[-1].checkpoint_id if self.completed else 0
                self.send(message.task, TriggerCheckpoint(
                    pending.checkpoint_id, pending.triggered_at, pending.is_final, False, completed,
                    reroute=pending.routing if pending.reroutes else None, patch=pending.patch,
                ))
        self._trigger_final()

    def restoring(self, tasks: set[TaskId]) -> None:
        """A lost worker's `tasks` restore while the others run on (`master.survivors`): what is
        pending can never complete (aborted, not counted as failed), the restored tasks may end
        again, and no checkpoint starts until `resume`."""
        self.paused = True
        self.ended -= tasks
        for pending in list(self.pending.values()):
            del self.pending[pending.checkpoint_id]
            for task in self.tasks:
                self.send(task, NotifyCheckpointAborted(pending.checkpoint_id))
            self._recent.append(pending.checkpoint_id)
            aborted = pending.abort(AbortReason.TASK_FAILED, "a worker was lost; its tasks restore")
            _keep_latest(self.aborted, aborted)
            if self.storage is not None:
                self.storage.discard(pending.checkpoint_id)
            if pending.is_final:
                self.final_checkpoint = None
            self.on_aborted(aborted)

    def resume(self) -> None:
        """The survivors caught up with the restored tasks: checkpoints go on."""
        self.paused = False
        if not self.is_stopped:
            self._trigger_final()

    def migrated(self) -> None:
        """The moved key groups were taken over: checkpoints go on (`trigger`'s `reroute`)."""
        self.migrating = None
        if not self.is_stopped:
            self._trigger_final()

    def _trigger_final(self) -> None:
        """Every task ended: the last checkpoint, once no key groups are on their way (a new owner
        must hold them when it snapshots)."""
        if (len(self.ended) == len(self.tasks) and not self.in_flight and self.final_checkpoint is None
                and self.migrating is None and not self.paused):
            self.trigger(is_final=True)

    def on_acknowledge(self, ack: AcknowledgeCheckpoint) -> AckResult:
        cpu = time.thread_time()
        pending = self.pending.get(ack.checkpoint_id)
        if pending is None:
            return AckResult.LATE if ack.checkpoint_id in self._recent else AckResult.UNKNOWN_CHECKPOINT
        result = pending.acknowledge(ack)
        pending.cpu_s += time.thread_time() - cpu
        if result is AckResult.ACCEPTED and pending.is_fully_acknowledged:
            self._complete(pending)
        return result

    def on_decline(self, decline: DeclineCheckpoint) -> None:
        pending = self.pending.get(decline.checkpoint_id)
        if pending is not None:
            self._abort(pending, AbortReason.DECLINED, f"{decline.task}: {decline.reason}")

    # -- endings ---------------------------------------------------------------------------------
    def _complete(self, pending: PendingCheckpoint) -> None:
        try:
            split_logs: tuple[SplitLogState, ...] = ()
            if self.enumerators is not None:
                split_logs = self.enumerators.persist(self.storage, pending.checkpoint_id, pending.split_marks)
            patches = self.patches.persist(self.storage, pending.checkpoint_id, pending.patch) if self.patches else ()
            manifest = pending.manifest(self.job, split_logs, self.counts_base, patches)
            if self.storage is not None:
                self.storage.write_manifest(manifest)
        except CheckpointError as exc:
            self._abort(pending, AbortReason.STORAGE_FAILED, str(exc))
            return
        if self.enumerators is not None:
            self.enumerators.completed(split_logs)
        del self.pending[pending.checkpoint_id]
        self._recent.append(pending.checkpoint_id)
        completed = pending.complete(manifest)
        _keep_latest(self.completed, completed)
        self._consecutive_failures = 0
        self._last_completion = self.clock.now()
        # Older pending checkpoints are subsumed: this one covers everything they would have.
        for older in [p for cid, p in self.pending.items() if cid < pending.checkpoint_id]:
            del self.pending[older.checkpoint_id]
            self._recent.append(older.checkpoint_id)
        in_flight = [p.based_on for p in self.pending.values()]
        self.merged_files.remember(manifest)
        self.merged_files.forget_before(min(in_flight, default=pending.checkpoint_id))
        if self.storage is not None:
            self.storage.retain(self.config.retain, pending.checkpoint_id, min(in_flight, default=None))
        self.on_completed(completed)
        log.info(
            "checkpoint %d complete (%.1f ms, %d bytes)", manifest.checkpoint_id, manifest.duration_ms, manifest.size
        )
        notify = NotifyCheckpointComplete(pending.checkpoint_id, pending.is_final)
        for task in self.tasks:
            self.send(task, notify)
        if pending.is_final:
            self.final_completed = True

    def _abort(self, pending: PendingCheckpoint, reason: AbortReason, detail: str) -> None:
        del self.pending[pending.checkpoint_id]
        switched = self.patches is not None and self.patches.switches_at(pending.checkpoint_id)
        # sources halted for it go on (synchronous mode); loop heads drop the log they keep for it
        for task in self.tasks:
            self.send(task, NotifyCheckpointAborted(pending.checkpoint_id))
        self._recent.append(pending.checkpoint_id)
        aborted = pending.abort(reason, detail)
        _keep_latest(self.aborted, aborted)
        log.warning("checkpoint %d aborted (%s): %s", pending.checkpoint_id, reason.value, detail)
        if self.storage is not None:
            self.storage.discard(pending.checkpoint_id)
        self.on_aborted(aborted)
        if pending.checkpoint_id in self.replays:  # its cut is lost: so are the cuts after it
            self.stop(AbortReason.TASK_FAILED)
            self.on_failure(ReplayAbandoned(f"checkpoint {pending.checkpoint_id}, an epoch replayed at its cut, was "
                                            f"aborted ({reason.value}: {detail}); restoring without its cut"))
            return
        if switched:  # tasks switched to the patch at its barrier: only a restore undoes that
            self.stop(AbortReason.TASK_FAILED)
            self.on_failure(CheckpointError(
                f"checkpoint {pending.checkpoint_id}, which switched in a patch, was aborted ({reason.value}: "
                f"{detail}); the job restores the checkpoint before it, with the old function"
            ))
            return
        if pending.reroutes:  # the tasks switched at its barrier: only a restore undoes that
            self.stop(AbortReason.TASK_FAILED)
            self.on_failure(CheckpointError(
                f"checkpoint {pending.checkpoint_id}, which moved key groups, was aborted ({reason.value}: "
                f"{detail}); the job restores the checkpoint before it, with the key groups where they were"
            ))
            return
        self._consecutive_failures += 1
        if self._consecutive_failures > self.config.tolerable_failures:
            error = CheckpointError(
                f"{self._consecutive_failures} consecutive checkpoint failure(s), "
                f"more than the {self.config.tolerable_failures} tolerated; last: checkpoint "
                f"{pending.checkpoint_id} {reason.value}: {detail}"
            )
            self.stop(AbortReason.TASK_FAILED)
            self.on_failure(error)
            return
        if pending.is_final:  # the last epoch must commit: try again at once
            self.final_checkpoint = None
            self.trigger(is_final=True)

    def stop(self, reason: AbortReason = AbortReason.COORDINATOR_STOPPED) -> None:
        """Abort everything pending and trigger nothing more (the attempt failed or was
        cancelled); nothing counts as failed."""
        self.is_stopped = True
        for pending in list(self.pending.values()):
            del self.pending[pending.checkpoint_id]
            _keep_latest(self.aborted, pending.abort(reason))
            if self.storage is not None:
                self.storage.discard(pending.checkpoint_id)


_KEPT = 16
T = TypeVar("T")


def _keep_latest(kept: list[T], item: T) -> None:
    kept.append(item)
    del kept[:-_KEPT]
