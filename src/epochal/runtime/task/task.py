"""A task: one subtask of one job vertex, running its chain of operators step by step.

A task never blocks. The host calls `step()` whenever `is_runnable()`; a step handles the
control messages that arrived, fires due timers, and processes at most one element from one
input (or one batch from its source). So a host can interleave many tasks on one event loop,
and the in-process executor can interleave them from a seed and replay a run exactly.

The task is the scheduler and dispatcher; the work lives in its parts: the `InputGate` reads the
inputs, joins batches and aligns barriers (ABS §4.2, Algorithm 1); the `SubtaskCheckpointer`
fixes, writes and acknowledges its state; `LoopProbes` holds its part in loop termination, and
`PendingSnapshots` the snapshots that log in-flight data (a loop head's, ABS §4.3, Algorithm 2,
and unaligned ones, in `in_flight`); `InputWatermarks` its event time; `KeyGroupOwner` its key
groups and those moving to it (`migration`); a source its splits, and those handed to it in a
live rescale (`split_handover`); the operators in `runtime.operators` do the processing. What
is left here, about 650 lines (over the 450 we aim for), is the dispatch of every in-band
element and control message: one short branch each (splits assigned by the enumerator or
handed over, live state queries, unaligned barriers, which jump the input queue, and rerouting
barriers are the newest), kept together so that their order within a step reads in one place;
and the task's own counters and clock (`step`, `task_metrics`), which the live metrics read
(`runtime.metrics`). Moving a branch out would split that order across modules that call
back into the task.
"""

from __future__ import annotations

import logging
import math
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any

from ...config import StateConfig
from ...plan.job_graph import JobVertex, TaskId
from ...state.keygroups import KeyGroupRange, KeyGroups, RoutingTable, key_group_range
from ...state.manifest import Manifest
from ...state.storage import CheckpointStorage
from ..clock import Clock
from ..in_flight import InFlight, PendingSnapshot, PendingSnapshots, in_flight_uid, read_in_flight
from ..loops import LoopProbes
from ..metrics import TaskMetrics
from ..migration import KeyGroupOwner
from ..operators import (
    IterationHeadOperator,
    KeyedOperator,
    LoopLog,
    OperatorContext,
    OperatorSnapshot,
    RuntimeOperator,
    SourceOperator,
    create_operator,
)
from ..split_handover import may_gain_splits, readers
from ..watermarks import END_OF_TIME, NO_WATERMARK, InputWatermarks, WatermarkAdvance
from ..wire.batches import batch_len
from ..wire.elements import END_OF_INPUT, Barrier, Batch, Element, EndOfInput, LoopProbe, Watermark, is_batch
from ..wire.messages import (
    AdoptKeyGroups,
    AdoptSplits,
    AssignSplits,
    EndLoop,
    InputsEnded,
    KeyGroupsAdopted,
    KeyGroupsPrepared,
    LoopRoundEnded,
    NoMoreSplits,
    NotifyCheckpointAborted,
    NotifyCheckpointComplete,
    OperatorMetrics,
    PrepareKeyGroups,
    QueryState,
    StateAnswer,
    TaskFinished,
    TriggerCheckpoint,
)
from .aligner import AlignStep
from .checkpointer import BackgroundRunner, Snapshots, SubtaskCheckpointer
from .input_gate import InputChannel, InputGate
from .output_gate import OutputGate
from .snapshots import read_operator_restore

log = logging.getLogger(__name__)

# Steps a host lets a runnable task take in a row before the next task's turn (`run_steps`).
# One step each would move every batch on at once: queues would never hold more than one, and
# the consumer would never get a backlog to join (`InputGate`). A few in a row let it, at a
# latency of a few steps; the channel's capacity bounds the backlog either way.
STEPS_IN_A_ROW = 4


class TaskState(Enum):
    RUNNING = "running"
    DRAINING = "draining"  # a loop head whose input ended: it runs until its loop is empty
    ENDED = "ended"  # inputs ended; waits for the final checkpoint to commit
    FINISHED = "finished"


@dataclass(frozen=True, slots=True)
class TaskSetup:
    """Everything a task needs besides its channels."""

    task_id: TaskId
    vertex: JobVertex
    max_parallelism: int
    batch_size: int
    clock: Clock
    storage: CheckpointStorage | None
    restore_from: Manifest | None
    send: Callable[[Any], None]  # to the job master
    background: BackgroundRunner
    state: StateConfig = StateConfig()  # the keyed-state backend and incremental checkpoints
    unaligned: bool = False  # checkpoints overtake queued input (`CheckpointConfig(mode="unaligned")`)
    routing: RoutingTable | None = None  # who owns which key group, if not contiguous ranges
    keyed: bool = False  # records reach it by key group: a routing table places its keyed state


class Task:
    """One subtask of a vertex: input gate → operator chain → output gate."""

    def __init__(
        self,
        setup: TaskSetup,
        inputs: Sequence[InputChannel],
        output: OutputGate,
        back_edges: frozenset[int] = frozenset(),
        loop_inputs: frozenset[int] = frozenset(),
    ) -> None:
        self.setup = setup
        self.id = setup.task_id
        self.name = f"{setup.vertex.name} [{setup.task_id.subtask + 1}/{setup.vertex.parallelism}]"
        self.output = output
        self.inbox: deque[Any] = deque()
        self.state = TaskState.RUNNING
        self.chain: list[RuntimeOperator] = [create_operator(spec) for spec in setup.vertex.chain]
        self.owner = KeyGroupOwner(  # its key groups, and those on their way here (`migration`)
            setup.routing.key_groups_of(setup.task_id.subtask) if setup.routing is not None
            else key_group_range(setup.task_id.subtask, setup.vertex.parallelism, setup.max_parallelism),
            self.chain, setup.task_id.subtask, setup.vertex.parallelism if setup.keyed else None,
        )
        first = self.chain[0]
        self.source: SourceOperator | None = first if isinstance(first, SourceOperator) else None
        if self.source is not None:  # a live rescale may hand it splits (`split_handover`)
            self.source.hands_over = may_gain_splits(setup.vertex, setup.routing)
        self.head: IterationHeadOperator | None = first if isinstance(first, IterationHeadOperator) else None
        self.gate = InputGate(
            inputs, back_edges, setup.batch_size, self.head.feedback_threshold if self.head is not None else None
        )
        self.back_edges = back_edges
        self.checkpointer = SubtaskCheckpointer(
            self.id, self.name, self.key_groups, setup.storage, setup.background, self.chain, setup.send, setup.state
        )
        self.watermarks = InputWatermarks(len(inputs), back_edges)
        # the last operator of the chain that generates watermarks (`assign_timestamps`), if any
        self._assigner = max((i for i, op in enumerate(self.chain) if op.generates_watermarks), default=None)
        self.probes = LoopProbes(self.head is not None, back_edges, loop_inputs, len(inputs))
        self.loop_snapshots = PendingSnapshots()  # a loop head's (ABS §4.3, Algorithm 2)
        self.unaligned = PendingSnapshots()  # unaligned checkpoints logging their inputs
        # only a task outside loops takes unaligned barriers ahead of its input (`in_flight`)
        self._overtakes = setup.unaligned and not back_edges and not loop_inputs
        self._replay: deque[tuple[int, Element]] = deque()  # restored in-flight data, first of all
        self.records_in = [0] * len(self.chain)
        self.records_out = [0] * len(self.chain)
        self.watermarks_seen = [NO_WATERMARK] * len(self.chain)  # per operator, for metrics
        # where the task's time goes (`run_steps`): two clock reads per run, none per record
        self.busy_s = 0.0
        self.backpressured_s = 0.0
        self._opened_at = self._ran_until = time.perf_counter()
        self._output_full = False  # the last run ended on a full output: the wait since is backpressure
        self.last_checkpoint = 0
        self.last_notified = 0  # the newest checkpoint this task knows to be complete
        self._halted_for: int | None = None  # a synchronous checkpoint this source waits for
        self._held: TriggerCheckpoint | None = None  # a replayed epoch's trigger, until its cut (`state.replay`)

    # -- lifecycle -------------------------------------------------------------------------------
    def open(self) -> None:
        """Open every operator and restore its state from the checkpoint, if any."""
        self._opened_at = self._ran_until = time.perf_counter()
        ctx = OperatorContext(
            self.id.subtask, self.setup.vertex.parallelism, self.setup.max_parallelism,
            self.key_groups, self.setup.clock, self.setup.state, self.name,
            active=None if self.setup.vertex.active is None else readers(self.setup.vertex, self.setup.routing),
        )
        manifest, storage = self.setup.restore_from, self.setup.storage
        for op in self.chain:
            op.open(ctx)
            keyed: dict[int, Any] | None = None
            states: list[Any] = []
            if manifest is not None:  # storage may be None: a savepoint is read where it lies
                keyed, states = read_operator_restore(
                    storage, manifest, op.uid, self.key_groups, self.setup.max_parallelism
                )
            op.restore(keyed, states)  # also on a fresh start: sinks clean up after a failed run
        if manifest is not None and manifest.replay is not None and self.source is not None:
            self.source.replay_to(manifest.replay.cuts_of(self.source.uid))  # epochs replayed at their cuts
        if manifest is not None:
            self._replay.extend(read_in_flight(storage, manifest, self.setup.vertex, self.id.subtask))
            self.last_checkpoint = self.last_notified = manifest.checkpoint_id
            self.gate.aligner.last_completed = manifest.checkpoint_id
            log.info("%s: restored from checkpoint %d", self.name, manifest.checkpoint_id)
        if not len(self.gate) and self.source is None:
            raise RuntimeError(f"task {self.name} has neither inputs nor a source")

    def close(self) -> None:
        self.checkpointer.close()
        for op in self.chain:
            try:
                op.close()
            except Exception:  # closing after a failure must not mask the failure
                log.debug("%s: closing %s failed", self.name, op.name, exc_info=True)

    # -- scheduling ------------------------------------------------------------------------------
    def next_timer(self) -> float | None:
        times = [t for op in self.chain if (t := op.next_timer()) is not None]
        return min(times) if times else None

    def is_runnable(self) -> bool:
        if self.state is TaskState.FINISHED:
            return False
        if self.inbox or self._replay or (self.head is not None and self.head.replay):
            return True
        if self.owner.pending is not None:  # key groups on their way here: no input until they are
            return False
        if self._overtakes and self.state is TaskState.RUNNING and self.gate.priority_queued():
            return True  # an unaligned barrier is taken even behind a full output
        if self.state is TaskState.ENDED or not self.output.has_capacity():
            return False
        if self.state is TaskState.DRAINING and not self.probes.in_flight:
            return True
        timer = self.next_timer()
        now = self.setup.clock.now()
        if timer is not None and timer <= now:
            return True
        if self.source is not None:
            return self._halted_for is None and self.source.ready(now)
        return self.gate.readable() is not None

    def run_steps(self, limit: int = STEPS_IN_A_ROW, until: float = math.inf) -> int:
        """Step while runnable, at most `limit` times and, after the first, not past `until` (a
        `time.perf_counter()` deadline: slow steps in a row would keep a worker from its sockets,
        where restarts and checkpoint triggers wait); returns how many steps were taken."""
        for taken in range(limit):
            if not self.is_runnable() or (taken and self._ran_until >= until):
                return taken
            self.step()
        return limit

    def step(self) -> None:
        """Do one unit of work; exceptions propagate to the host, which fails the attempt.

        Also where the task's time is measured, with a clock read at each end of the step (one
        batch at most, never per record): the step is busy time; the wait since the previous
        step is backpressure when that one left an output channel full, else idle time.
        """
        started = time.perf_counter()
        if self._output_full:
            self.backpressured_s += started - self._ran_until
        self._step()
        self._ran_until = ended = time.perf_counter()
        self.busy_s += ended - started
        self._output_full = not self.output.has_capacity()

    def _step(self) -> None:
        if self.head is not None and self.head.replay:
            self._replay_loop_log()
        while self._replay:
            self._on_element(*self._replay.popleft())
        while self.inbox:
            self._on_message(self.inbox.popleft())
            if self.state is TaskState.FINISHED:
                return
        if self.owner.pending is not None:
            return
        if self._overtakes and self.state is TaskState.RUNNING:
            self._take_priority_barriers()
        if self.state not in (TaskState.RUNNING, TaskState.DRAINING) or not self.output.has_capacity():
            return
        if self.state is TaskState.DRAINING and not self.probes.in_flight and self.gate.readable() is None:
            self.output.broadcast_loop(self.probes.start_round())
            return
        timer = self.next_timer()
        if timer is not None and timer <= self.setup.clock.now():
            self._fire_timers()
        if self.source is not None:
            if self._halted_for is None:
                self._step_source()
        else:
            self._step_input()

    # -- data ------------------------------------------------------------------------------------
    def _run_chain(self, start: int, batch: Batch | None) -> None:
        for i in range(start, len(self.chain)):
            if batch is None:
                return
            n = batch_len(batch)
            if n == 0:
                return
            self.records_in[i] += n
            batch = self.chain[i].process(batch)
            if batch is not None:
                self.records_out[i] += batch_len(batch)
        if batch is not None and batch_len(batch):
            self.output.emit(batch)
        if self._assigner is not None and start <= self._assigner:
            advance = self.chain[self._assigner].take_watermark()
            if advance is not None:
                self._advance_watermark(advance, self._assigner + 1)

    def _step_source(self) -> None:
        assert self.source is not None
        source = self.source
        batch = source.poll(self.setup.batch_size)
        if batch is None:
            if source.watermarks is not None:
                self._advance_watermark(WatermarkAdvance(END_OF_TIME), 1)
            self._end_input()
        else:
            self.records_out[0] += batch_len(batch)
            self._run_chain(1, batch)
            if source.watermarks is not None and (advance := source.take_watermark()) is not None:
                self._advance_watermark(advance, 1)
        if self._held is not None and (self.state is not TaskState.RUNNING or source.at_cut()):
            held, self._held = self._held, None
            self._on_trigger(held)  # the replayed epoch's cut: its barrier goes now

    def _step_input(self) -> None:
        polled = self.gate.poll()
        if polled is None:
            return
        idx, element = polled
        if self._overtakes and self.unaligned and (is_batch(element) or type(element) is Watermark):
            self.unaligned.log(idx, element)
        self._on_element(idx, element)

    def _on_element(self, idx: int, element: Element) -> None:
        if is_batch(element):
            self.probes.active = True
            if idx in self.back_edges:
                self.loop_snapshots.log(idx, element)
            self._run_chain(0, element)
        elif type(element) is Barrier:
            step = self.gate.on_barrier(idx, element)
            self._decline_abandoned()
            if step is AlignStep.SNAPSHOT:
                self._checkpoint(element)
            elif step is AlignStep.LOOP_RETURN:
                self._loop_snapshot_done(self.loop_snapshots.arrived(idx, element.checkpoint_id))
        elif type(element) is EndOfInput:
            self._on_end_of_input(idx)
        elif type(element) is LoopProbe:
            self._on_probe(element)
        elif type(element) is Watermark:
            advance = self.watermarks.on_watermark(idx, element.timestamp, element.idle)
            if advance is not None:
                self._advance_watermark(advance, 0)
        else:
            raise RuntimeError(f"task {self.name}: unexpected element {element!r}")

    def _on_end_of_input(self, idx: int) -> None:
        advance = self.watermarks.on_end(idx)
        if advance is not None and self.watermarks.has_seen:
            self._advance_watermark(advance, 0)
        aligner = self.gate.aligner
        if aligner.on_end_of_input(idx) is AlignStep.SNAPSHOT:
            assert aligner.completed is not None
            self._checkpoint(aligner.completed)
        if idx in self.back_edges:
            for pending in self.loop_snapshots.channel_ended(idx):
                self._loop_snapshot_done(pending)
        for pending in self.unaligned.channel_ended(idx):
            self._unaligned_done(pending)
        if aligner.all_ended:
            if self.state is not TaskState.ENDED:
                self._end_input()
        elif self.head is not None and aligner.regular_ended and self.state is TaskState.RUNNING:
            # The loop's input ended; the loop itself may still hold records.
            self.state = TaskState.DRAINING
            self.setup.send(InputsEnded(self.id))

    def _advance_watermark(self, advance: WatermarkAdvance, start: int) -> None:
        """Event time moved: operators from `start` on fire what is due, then it goes downstream."""
        if self._assigner is not None and start <= self._assigner and advance.timestamp != END_OF_TIME:
            return  # upstream event time ends at the assigner, which makes its own
        if start:  # the source or the assigner that generated it
            self.watermarks_seen[start - 1] = advance.timestamp
        for i in range(start, len(self.chain)):
            self.watermarks_seen[i] = advance.timestamp
            out = self.chain[i].on_watermark(advance.timestamp)
            if out is not None and batch_len(out):
                self.records_out[i] += batch_len(out)
                self._run_chain(i + 1, out)
        self.output.broadcast(Watermark(advance.timestamp, advance.idle))

    def _fire_timers(self) -> None:
        now = self.setup.clock.now()
        for i, op in enumerate(self.chain):
            timer = op.next_timer()
            if timer is not None and timer <= now:
                out = op.on_processing_time(now)
                if out is not None:
                    self.records_out[i] += batch_len(out)
                    self._run_chain(i + 1, out)
                if i == self._assigner and (advance := op.take_watermark()) is not None:
                    self._advance_watermark(advance, i + 1)  # its input went idle

    def _emit_pre_barrier(self, checkpoint_id: int) -> None:
        """In chain order, so what one operator emits ahead of the barrier reaches the next first."""
        for i, op in enumerate(self.chain):
            out = op.pre_barrier(checkpoint_id)
            if out is not None and batch_len(out):
                self.records_out[i] += batch_len(out)
                self._run_chain(i + 1, out)

    def _end_input(self) -> None:
        # Flush each operator in chain order, so what one emits at the end reaches the next.
        for i, op in enumerate(self.chain):
            out = op.end_input()
            if out is not None:
                self.records_out[i] += batch_len(out)
                self._run_chain(i + 1, out)
        self.output.broadcast(END_OF_INPUT)
        self.state = TaskState.ENDED
        self.setup.send(InputsEnded(self.id))

    # -- loops -----------------------------------------------------------------------------------
    def _replay_loop_log(self) -> None:
        """Feed the restored loop log back into the loop before anything else (ABS §4.3)."""
        assert self.head is not None
        batches, self.head.replay = self.head.replay, []
        for batch in batches:
            self._run_chain(0, batch)

    def _on_probe(self, probe: LoopProbe) -> None:
        outcome = self.probes.on_probe(probe, self.gate.aligner.ended)
        if isinstance(outcome, LoopProbe):
            self.output.broadcast_loop(outcome)
        elif outcome is not None:  # a head's verdict: the job master decides
            probe_round, clean = outcome
            self.setup.send(LoopRoundEnded(self.id, probe_round, clean))

    def _loop_snapshot_done(self, pending: PendingSnapshot | None) -> None:
        """Every back-edge returned the barrier: the head's state is its logged feedback."""
        if pending is None:
            return
        assert self.head is not None
        log_state = OperatorSnapshot(state=LoopLog(tuple(batch for _, batch in pending.log)))
        snapshots = [(uid, log_state if uid == self.head.uid else snap) for uid, snap in pending.snapshots]
        self.checkpointer.write(pending.checkpoint_id, snapshots, pending.alignment_ms, pending.sync_ms)

    # -- checkpoints -----------------------------------------------------------------------------
    def _decline_abandoned(self) -> None:
        abandoned = self.gate.aligner.abandoned
        while abandoned:
            self.checkpointer.decline(abandoned.pop(), "alignment abandoned for a newer barrier")

    def _checkpoint(self, barrier: Barrier) -> None:
        """Fix state, forward the barrier, and write the snapshot in the background."""
        reroute = barrier.reroute
        if (reroute is not None and self.source is not None and self.state is TaskState.RUNNING
                and reroute.parallelism == self.setup.vertex.parallelism and self.source.gains(reroute.active)):
            self.output.broadcast(Watermark(NO_WATERMARK))  # ahead of the barrier: splits come (`gains`)
        snapshots, alignment_ms, sync_ms = self._fix_state(barrier)
        open_back_edges = set(self.back_edges) - self.gate.aligner.ended
        if self.head is not None and open_back_edges and self.state is not TaskState.ENDED:
            # ABS Algorithm 2: the state copy is fixed; log feedback until the barrier is back.
            self.loop_snapshots.hold(
                PendingSnapshot(barrier.checkpoint_id, open_back_edges, snapshots, alignment_ms, sync_ms)
            )
            return
        self.checkpointer.write(barrier.checkpoint_id, snapshots, alignment_ms, sync_ms, barrier.synchronous)
        if barrier.reroute is not None:
            self.output.reroute(barrier.reroute)  # the barrier went out under the old table
            self.owner.reroute(barrier.checkpoint_id, barrier.reroute)
            self.checkpointer.key_groups = self.owner.key_groups
            if self.owner.early is not None:  # the moving groups are durable already
                self._adopt(self.owner.early)
            if self.source is not None and barrier.reroute.parallelism == self.setup.vertex.parallelism:
                advance = self.source.hand_over(barrier.checkpoint_id, barrier.reroute.active)
                if advance is not None:
                    self._advance_watermark(advance, 1)

    def _fix_state(self, barrier: Barrier) -> tuple[Snapshots, float, float]:
        """The synchronous part: fix every operator's state and forward the barrier; returns the
        snapshots, the alignment's and this part's milliseconds.

        The barrier says which checkpoint was complete when it was triggered. On Spark the
        notification of that completion travels on another connection than the barrier and may
        arrive later; acting on it first means incremental state never builds on a checkpoint
        that retention may already have dropped (and commits nothing that is not complete).
        """
        if barrier.completed > self.last_notified:
            self._notify_complete(barrier.completed)
        alignment_ms = self.gate.take_alignment_ms()
        started = time.perf_counter()
        if self.state in (TaskState.RUNNING, TaskState.DRAINING):
            self._emit_pre_barrier(barrier.checkpoint_id)
        snapshots: Snapshots = self.checkpointer.snapshot(self.chain, barrier.checkpoint_id)
        if self.state in (TaskState.RUNNING, TaskState.DRAINING):
            self.output.broadcast(barrier)
        # after the barrier left: downstream aligns while this task serialises a small state
        self.checkpointer.serialise_small(snapshots)
        sync_ms = (time.perf_counter() - started) * 1000
        self.last_checkpoint = barrier.checkpoint_id
        return snapshots, alignment_ms, sync_ms

    # -- unaligned checkpoints (`in_flight`) -----------------------------------------------------
    def _take_priority_barriers(self) -> None:
        """Take every unaligned barrier out of its input queue, ahead of the data before it."""
        for idx, channel in enumerate(self.gate.channels):
            while channel.priority:
                ahead, barrier = channel.take_priority_barrier()
                self._on_priority_barrier(idx, ahead, barrier)

    def _on_priority_barrier(self, idx: int, ahead: list[Element], barrier: Barrier) -> None:
        """The first barrier of a checkpoint fixes the state at once; `ahead` (still queued, not yet
        processed) is in flight for it, and for every snapshot still waiting on this input."""
        cid = barrier.checkpoint_id
        if cid not in self.unaligned and cid > self.last_checkpoint:
            aligner = self.gate.aligner
            if aligner.is_aligning:  # an older aligned checkpoint (a savepoint) is given up
                aligner.abandon()
                self.gate.reset_alignment_clock()
                self._decline_abandoned()
            aligner.last_completed = cid
            snapshots, _, sync_ms = self._fix_state(barrier)
            waiting = set(aligner.regular - aligner.ended)
            self.unaligned.hold(PendingSnapshot(cid, waiting, snapshots, 0.0, sync_ms))
        for element in ahead:
            if is_batch(element) or type(element) is Watermark:
                self.unaligned.log(idx, element)
        self._unaligned_done(self.unaligned.arrived(idx, cid))

    def _unaligned_done(self, pending: PendingSnapshot | None) -> None:
        """Every input delivered the barrier: the snapshot goes out with its in-flight log."""
        if pending is None:
            return
        in_flight = OperatorSnapshot(state=InFlight(tuple(pending.log)) if pending.log else None)
        snapshots = [*pending.snapshots, (in_flight_uid(self.setup.vertex), in_flight)]
        self.checkpointer.write(pending.checkpoint_id, snapshots, pending.alignment_ms, pending.sync_ms)

    def _on_message(self, message: Any) -> None:
        kind = type(message)
        if kind is TriggerCheckpoint:
            self._on_trigger(message)
        elif kind is EndLoop:
            if self.state is TaskState.DRAINING:
                self._end_input()  # every head saw a clean round: the loop is empty
        elif kind is NotifyCheckpointAborted:
            if self._halted_for == message.checkpoint_id:
                self._halted_for = None
        elif kind is NotifyCheckpointComplete:
            if self._halted_for is not None and self._halted_for <= message.checkpoint_id:
                self._halted_for = None
            self._notify_complete(message.checkpoint_id)
            if message.is_final:
                self.state = TaskState.FINISHED
                self.close()
                self.setup.send(TaskFinished(self.id, self.metrics()))
        elif kind is QueryState:
            if self.owner.pending is not None:  # it may ask of a key group on its way here
                self.owner.pending.queries.append(message)
            else:
                self.setup.send(self._answer(message))
        elif kind is AssignSplits and self.source is not None:
            self.source.assign(message.splits, message.indices)
        elif kind is AdoptSplits and self.source is not None:
            self._adopt_splits(message.manifest)
        elif kind is NoMoreSplits and self.source is not None:
            self.source.no_more_splits = True
        elif kind is AdoptKeyGroups:
            self._adopt(message.manifest)
        elif kind is PrepareKeyGroups:
            self._prepare(message)
        else:
            raise RuntimeError(f"task {self.name}: unexpected control message {message!r}")

    def _answer(self, query: QueryState) -> StateAnswer:
        """A live state query, between two batches: the state as this task's records left it."""
        op = next((op for op in self.chain if op.uid == query.uid), None)
        if not isinstance(op, KeyedOperator):
            return StateAnswer(self.id, query.query, {}, f"operator uid {query.uid!r} has no keyed state")
        try:
            return StateAnswer(self.id, query.query, op.query(query.key))
        except Exception as exc:  # noqa: BLE001 - the answer says why; the task runs on
            return StateAnswer(self.id, query.query, {}, f"{type(exc).__name__}: {exc}")

    def _on_trigger(self, message: TriggerCheckpoint) -> None:
        if message.checkpoint_id <= self.last_checkpoint:
            return  # the barrier reached this task through its inputs already
        if self.source is not None and self.state is TaskState.RUNNING and self.source.holds(message.checkpoint_id):
            self._held = message  # a replayed epoch: its barrier waits for the cut (`_step_source`)
            return
        if self.source is not None:
            self.source.cut_passed(message.checkpoint_id)
        if self.source is not None and self.state is TaskState.RUNNING:
            self.gate.reset_alignment_clock()
            self._checkpoint(Barrier(
                message.checkpoint_id, message.timestamp, message.synchronous, message.completed, message.alignment,
                message.reroute,
            ))
            if message.synchronous:
                self._halted_for = message.checkpoint_id
        elif self.state in (TaskState.ENDED, TaskState.DRAINING):
            self._checkpoint(Barrier(
                message.checkpoint_id, message.timestamp, False, message.completed, reroute=message.reroute
            ))

    # -- live migration (`runtime.migration`) ----------------------------------------------------
    def _prepare(self, message: PrepareKeyGroups) -> None:
        """Read ahead, off the processing path, the key groups about to move here (pre-copy)."""
        checkpoint_id = message.manifest.checkpoint_id

        def done(prepared: Any) -> None:
            self.owner.prepared = prepared
            self.setup.send(KeyGroupsPrepared(self.id, checkpoint_id, prepared is not None))

        self.setup.background.read_ahead(self.owner.preparation(message.manifest, message.table, self.setup.storage),
                                         done)

    def _adopt(self, manifest: Manifest) -> None:
        """The old owners' part of rerouting checkpoint `manifest` is durable: take over the key
        groups that moved here, and go on."""
        adopted = self.owner.adopt(manifest, self.setup.storage, self.setup.max_parallelism)
        if adopted is None:
            return
        self.checkpointer.key_groups = self.owner.key_groups
        self.inbox.extend(adopted.queries)
        log.info("%s: took over key groups %s at checkpoint %d", self.name, adopted.gained, manifest.checkpoint_id)
        self.setup.send(KeyGroupsAdopted(self.id, manifest.checkpoint_id))

    def _adopt_splits(self, manifest: Manifest) -> None:
        """Checkpoint `manifest` handed splits to this source: their positions are in it (`split_handover`)."""
        assert self.source is not None
        if self.source.awaits(manifest.checkpoint_id):
            _, states = read_operator_restore(self.setup.storage, manifest, self.source.uid, KeyGroupRange(0, 0),
                                              self.setup.max_parallelism)
            gained = self.source.adopt(states)
            log.info("%s: took over splits %s at checkpoint %d", self.name, [s.split_id for s in gained],
                     manifest.checkpoint_id)

    @property
    def key_groups(self) -> KeyGroups:
        return self.owner.key_groups

    def _notify_complete(self, checkpoint_id: int) -> None:
        if checkpoint_id <= self.last_notified:
            return  # learnt from a barrier already
        self.last_notified = checkpoint_id
        for op in self.chain:
            op.notify_checkpoint_complete(checkpoint_id)

    def metrics(self) -> tuple[OperatorMetrics, ...]:
        return tuple(
            OperatorMetrics(op.name, self.records_in[i], self.records_out[i], op.late_records, op.skipped_records)
            for i, op in enumerate(self.chain)
        )

    def task_metrics(self) -> TaskMetrics:
        """The counters, the time spent and the input queues, for live metrics (`runtime.metrics`)."""
        now = time.perf_counter()
        held = self.backpressured_s + (now - self._ran_until if self._output_full else 0.0)
        return TaskMetrics(
            self.id, self.metrics(), tuple(self.watermarks_seen), self.busy_s, held, now - self._opened_at,
            self.gate.queued(),
        )
