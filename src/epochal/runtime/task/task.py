"""A task: one subtask of one job vertex, running its chain of operators step by step.

A task never blocks. The host calls `step()` whenever `is_runnable()`; a step handles the
control messages that arrived, fires due timers, and processes at most one element from one
input (or one batch from its source). So a host can interleave many tasks on one event loop,
and the in-process executor can interleave them from a seed and replay a run exactly.

The task schedules and dispatches; the work lives in its parts: `GateInput` (the step of a task
with inputs: elements from the `InputGate`, with its alignment, ABS §4.2, Algorithm 1, into the
chain; the inputs' watermarks; restored in-flight data), `SourceInput`, `OperatorChain`
(operators, counters, event time), `OutputGate`, `TaskCheckpoints` (the synchronous part at a
barrier; the checkpoints taken and known complete) over `SubtaskCheckpointer` (the write),
`UnalignedBarriers` (`in_flight`), `TaskLoop` (loop termination and a head's snapshots: ABS §4.3,
Algorithm 2) and `KeyGroupOwner` (what it owns, and what a live move hands it). What stays here is
the task's lifecycle (`TaskState`) and the order within a step: replayed input, control messages,
timers, one element.
"""

from __future__ import annotations

import logging
import math
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

from ...state.keygroups import KeyGroups, key_group_range
from ...state.manifest import Manifest
from ..channel_state import in_flight_uid
from ..metrics import TaskMetrics
from ..operators import (
    IterationHeadOperator,
    OperatorContext,
    RuntimeOperator,
    create_operator,
)
from ..splits import readers
from ..wire.elements import END_OF_INPUT, Barrier
from ..wire.messages import (
    AdoptKeyGroups,
    DropPatch,
    EndLoop,
    InputsEnded,
    LoopRoundEnded,
    NotifyCheckpointAborted,
    NotifyCheckpointComplete,
    OperatorMetrics,
    PrepareKeyGroups,
    QueryState,
    ResizePool,
    StagePatch,
    TaskFinished,
    TriggerCheckpoint,
)
from .chain import OperatorChain
from .checkpointer import SubtaskCheckpointer
from .gate_input import GateInput
from .in_flight import UnalignedBarriers, read_in_flight
from .input_gate import InputChannel, InputGate
from .key_group_owner import KeyGroupOwner
from .loop_clock import LoopClock
from .loop_cut import LoopCut
from .loop_probes import ScopeRounds, TaskLoop
from .output_gate import OutputGate
from .patching import TaskPatches
from .pool_reports import PoolReports
from .setup import STEPS_IN_A_ROW, TaskSetup, TaskState
from .snapshots import read_operator_restore
from .source_input import SourceInput
from .step_times import StepTimes
from .task_checkpoints import TaskCheckpoints
from .wakeups import WakingRunner, no_wake

log = logging.getLogger(__name__)


class Task:
    """One subtask of a vertex: input gate → operator chain → output gate."""

    def __init__(
        self,
        setup: TaskSetup,
        inputs: Sequence[InputChannel],
        output: OutputGate,
        back_edges: frozenset[int] = frozenset(),
        loop_inputs: frozenset[int] = frozenset(),
        second_inputs: frozenset[int] = frozenset(),
        scopes: dict[int, ScopeRounds] | None = None,
    ) -> None:
        self.setup = setup
        self.id = setup.task_id
        self.name = f"{setup.vertex.name} [{setup.task_id.subtask + 1}/{setup.vertex.parallelism}]"
        self.output = output
        self.inbox: deque[Any] = deque()
        self.state = TaskState.RUNNING
        self.wake: Callable[[], None] = no_wake  # set by a host that steps only tasks woken (`wakeups`)
        background = WakingRunner(setup.background, self._wake)
        self.chain = OperatorChain([create_operator(spec) for spec in setup.vertex.chain], output, self.name)
        self.owner = KeyGroupOwner(  # what it owns, and the key groups on their way here (`master.migrations`)
            setup.routing.key_groups_of(setup.task_id.subtask) if setup.routing is not None
            else key_group_range(setup.task_id.subtask, setup.vertex.parallelism, setup.max_parallelism),
            self.chain.operators, setup.task_id, self.name, setup.vertex.parallelism if setup.keyed else None,
            setup.storage, setup.max_parallelism, setup.send,
        )
        first = self.chain.first
        self.source = SourceInput.of(first, self.chain, setup.vertex, setup.routing, setup.restore_from)
        self.head: IterationHeadOperator | None = first if isinstance(first, IterationHeadOperator) else None
        self.gate = InputGate(
            inputs, back_edges, setup.batch_size, self.head.feedback_threshold if self.head is not None else None
        )
        self.gate.wake = output.wake = self._wake
        self.back_edges = back_edges
        self.checkpointer = SubtaskCheckpointer(self.id, self.name, lambda: self.owner.key_groups, setup.storage,
                                                background, self.chain.operators, setup.send, setup.state,
                                                setup.merger)
        event_time = self.head.event_time if self.head is not None else None
        self.loop = TaskLoop(
            self.head, scopes or {}, setup.vertex.id if self.head is not None else None,
            LoopClock(event_time, self.head) if self.head is not None and event_time is not None else None,
            output, lambda n, clean: setup.send(LoopRoundEnded(self.id, n, clean)), setup.clock,
        )
        self.patches = TaskPatches(self.chain, setup.vertex.chain, self.id, setup.send)  # live logic patches
        self.pools = PoolReports(self.chain, self.id, setup.send, setup.clock)  # function pools' resizes
        self.checkpoints = TaskCheckpoints(
            self.checkpointer, self.gate, self.chain, output, self.patches, setup.clock,
            lambda: self.state in (TaskState.RUNNING, TaskState.DRAINING), self.metrics,
        )
        # a loop head takes every barrier ahead of its queues: an unaligned cut (`loop_cut`)
        self.cut = LoopCut(self.gate, self.checkpoints, self.head.uid) if self.head is not None else None
        self.unaligned = UnalignedBarriers(self.gate, self.checkpoints, in_flight_uid(setup.vertex))
        # only a task outside loops takes unaligned barriers ahead of its input (`in_flight`)
        self.input = GateInput(self, self.name, self.gate, self.chain, output, self.loop, self.cut, self.unaligned,
                               self.checkpoints, setup.unaligned and not back_edges and not loop_inputs,
                               second_inputs, back_edges, self.head is not None)
        self.times = StepTimes()  # where the task's time goes: two clock reads per step, none per record
        self._said_in_flight = False  # its inputs ended with async requests in flight (`end_input`)
        self._handlers: dict[type, Callable[[Any], None]] = {
            TriggerCheckpoint: self._on_trigger, EndLoop: self._on_end_loop,
            StagePatch: self.patches.stage, DropPatch: self.patches.drop, ResizePool: self.pools.resize,
            NotifyCheckpointAborted: self._on_aborted, NotifyCheckpointComplete: self._on_complete,
            QueryState: self.owner.query, AdoptKeyGroups: lambda m: self._adopt(m.manifest),
            PrepareKeyGroups: lambda m: self.owner.prepare(m, background),
        }
        if self.source is not None:
            self._handlers.update(self.source.handlers(self.owner))

    # -- lifecycle -------------------------------------------------------------------------------
    def open(self) -> None:
        """Open every operator and restore its state from the checkpoint, if any."""
        self.times.open()
        setup = self.setup
        ctx = OperatorContext(
            self.id.subtask, setup.vertex.parallelism, setup.max_parallelism, self.key_groups, setup.clock,
            setup.state, self.name,
            active=None if setup.vertex.active is None else readers(setup.vertex, setup.routing),
            restored_checkpoint=None if setup.restore_from is None else setup.restore_from.checkpoint_id,
        )
        manifest, storage = setup.restore_from, setup.storage

        def restored(op: RuntimeOperator) -> tuple[dict[int, Any] | None, list[Any]]:
            if manifest is None:  # storage may be None: a savepoint is read where it lies
                return None, []
            return read_operator_restore(storage, manifest, op.uid, self.key_groups, setup.max_parallelism)

        if manifest is not None:  # the functions live patches put in effect at the checkpoint
            self.patches.restore(manifest, storage)
        self.chain.open(ctx, restored)
        if manifest is not None:
            self.input.restore(read_in_flight(storage, manifest, setup.vertex, self.id.subtask))
            self.checkpoints.restored(manifest.checkpoint_id)
            self.gate.aligner.last_completed = manifest.checkpoint_id
            log.info("%s: restored from checkpoint %d", self.name, manifest.checkpoint_id)
        if not len(self.gate) and self.source is None:
            raise RuntimeError(f"task {self.name} has neither inputs nor a source")

    def close(self) -> None:
        self.checkpointer.close()
        self.chain.close()

    # -- scheduling ------------------------------------------------------------------------------
    def _wake(self) -> None:
        self.wake()

    def next_timer(self) -> float | None:
        timer = self.pools.next_timer(self.chain.next_timer())
        paced = self.loop.next_round_at()
        if paced is None or self.state not in (TaskState.RUNNING, TaskState.DRAINING):
            return timer
        return paced if timer is None else min(timer, paced)

    def is_runnable(self) -> bool:
        if self.state is TaskState.FINISHED:
            return False
        if self.inbox or self.input.replaying or (self.head is not None and self.head.replay):
            return True
        if self.owner.pending is not None:  # key groups on their way here: no input until they are
            return False
        if self.input.overtakes and self.state is TaskState.RUNNING and self.gate.priority_queued():
            return True  # an unaligned barrier is taken even behind a full output
        if self.cut is not None and self.state is not TaskState.ENDED and self.gate.priority_queued():
            return True  # so is a barrier into a loop head
        if self.state is TaskState.ENDED or not self.output.has_capacity():
            return False
        if self.loop.wants_round(self.state is TaskState.DRAINING, True):
            return True
        timer = self.next_timer()
        now = self.setup.clock.now()
        if timer is not None and timer <= now:
            return True
        chain = self.chain
        if chain.async_ops and (chain.has_ready() or chain.is_saturated() or chain.ending):
            return chain.has_ready()  # results to let go; no input while one is full or ending
        if self.source is not None:
            return self.source.ready(now)
        return self.gate.readable() is not None

    def run_steps(self, limit: int = STEPS_IN_A_ROW, until: float = math.inf) -> int:
        """Step while runnable, at most `limit` times and, after the first, not past `until` (a
        `time.perf_counter()` deadline: slow steps in a row would keep a worker from its sockets,
        where restarts and checkpoint triggers wait); returns how many steps were taken."""
        for taken in range(limit):
            if not self.is_runnable() or (taken and self.times.ran_until >= until):
                return taken
            self.step()
        return limit

    def step(self) -> None:
        """Do one unit of work, timed (`StepTimes`); exceptions propagate to the host, which
        fails the attempt."""
        started = self.times.started()
        self._step()
        self.times.ended(started, not self.output.has_capacity())

    def _step(self) -> None:
        self.pools.poll()
        self.loop.replay(self.chain)
        self.input.replay()
        while self.inbox:
            self._on_message(self.inbox.popleft())
            if self.state is TaskState.FINISHED:
                return
        if self.owner.pending is not None:
            return
        if self.input.overtakes and self.state is TaskState.RUNNING:
            self.unaligned.take_priority_barriers()
        if self.cut is not None and self.state is not TaskState.ENDED:
            self.cut.take_barriers()
        if self.state not in (TaskState.RUNNING, TaskState.DRAINING) or not self.output.has_capacity():
            return
        draining = self.state is TaskState.DRAINING
        if self.loop.wants_round(draining, self.gate.readable() is None):
            self.loop.start_round()
            if draining:
                return
        timer = self.next_timer()
        now = self.setup.clock.now()
        if timer is not None and timer <= now:
            self.chain.fire_timers(now)
        chain = self.chain
        if chain.async_ops:  # results of async I/O; no input while an operator is full
            if chain.has_ready():
                chain.poll_async()
            if chain.ending:
                self.end_input()
                return
            if chain.is_saturated():
                return
        if self.source is not None:
            if not self.source.step(self.setup.batch_size):
                self.end_input()
            if (held := self.source.released(self.state is not TaskState.RUNNING)) is not None:
                self._on_trigger(held)  # a replayed epoch's cut: its barrier goes now
        else:
            self.input.step()

    # -- input ---------------------------------------------------------------------------------
    def drain(self) -> None:
        """A loop head's input ended; the loop itself may still hold records (`GateInput`)."""
        self.state = TaskState.DRAINING
        self.setup.send(InputsEnded(self.id))

    def end_input(self) -> None:
        if not self.chain.end_input():  # async requests in flight: a later step ends the input
            if not self._said_in_flight:  # meanwhile no barrier reaches it: it is triggered directly
                self._said_in_flight = True
                self.setup.send(InputsEnded(self.id, in_flight=True))
            return
        self.output.broadcast(END_OF_INPUT)
        self.state = TaskState.ENDED
        self.setup.send(InputsEnded(self.id))

    # -- loops -----------------------------------------------------------------------------------
    def _on_end_loop(self, _: EndLoop) -> None:
        if self.state is TaskState.DRAINING:
            self.end_input()  # every head saw a clean round: the loop is empty
            if self.cut is not None:
                self.cut.loop_ended()

    # -- checkpoints -----------------------------------------------------------------------------
    def checkpoint(self, barrier: Barrier) -> None:
        """Fix state, forward the barrier, and write the snapshot in the background."""
        if self.cut is not None:  # a loop head triggered directly (its input ended): log what is open
            self.cut.fix(barrier, loop_ended=self.state is TaskState.ENDED)
            return
        reroute = barrier.reroute
        if reroute is not None and self.source is not None and self.state is TaskState.RUNNING:
            self.source.before_reroute(reroute, self.output)
        snapshots, alignment_ms, sync_ms = self.checkpoints.fix_state(barrier)
        self.checkpoints.write(barrier.checkpoint_id, snapshots, alignment_ms, sync_ms, barrier.synchronous)
        if barrier.reroute is not None:
            self.output.reroute(barrier.reroute)  # the barrier went out under the old table
            self.owner.reroute(barrier.checkpoint_id, barrier.reroute)
            if self.owner.early is not None:  # the moving groups are durable already
                self._adopt(self.owner.early)
            if self.source is not None:
                self.source.after_reroute(barrier.checkpoint_id, barrier.reroute)

    def _on_trigger(self, message: TriggerCheckpoint) -> None:
        if message.checkpoint_id <= self.checkpoints.last_checkpoint:
            return  # the barrier reached this task through its inputs already
        if self.source is not None and self.source.holds(message, self.state is TaskState.RUNNING):
            return  # a replayed epoch: its barrier waits for the cut
        if self.source is not None and self.state is TaskState.RUNNING:
            self.gate.reset_alignment_clock()
            self.checkpoint(Barrier(
                message.checkpoint_id, message.timestamp, message.synchronous, message.completed, message.alignment,
                message.reroute, patch=message.patch,
            ))
            if message.synchronous:
                self.source.halt(message.checkpoint_id)
        elif self.state in (TaskState.ENDED, TaskState.DRAINING) or self.chain.ending:
            self.checkpoint(Barrier(
                message.checkpoint_id, message.timestamp, False, message.completed, reroute=message.reroute,
                patch=message.patch,
            ))

    def _on_aborted(self, message: NotifyCheckpointAborted) -> None:
        pending = self.gate.aligner.pending
        if pending is not None and pending.checkpoint_id == message.checkpoint_id:
            self.checkpoints.abandon_alignment()  # its barrier may never come on some input (a lost worker's)
        elif pending is None or pending.checkpoint_id < message.checkpoint_id:
            self.gate.aligner.aborted(message.checkpoint_id)  # nor align it if its barrier comes still
        if self.source is not None:
            self.source.aborted(message.checkpoint_id)
        if self.cut is not None:
            self.cut.aborted(message.checkpoint_id)

    def _on_complete(self, message: NotifyCheckpointComplete) -> None:
        if self.source is not None:
            self.source.completed(message.checkpoint_id)
        self.checkpoints.notify_complete(message.checkpoint_id)
        if self.cut is not None:
            self.cut.completed(message.checkpoint_id)
        if message.is_final:
            self.state = TaskState.FINISHED
            self.close()
            self.setup.send(TaskFinished(self.id, self.metrics()))

    # -- control messages ------------------------------------------------------------------------
    def _on_message(self, message: Any) -> None:
        handler = self._handlers.get(type(message))
        if handler is None:
            raise RuntimeError(f"task {self.name}: unexpected control message {message!r}")
        handler(message)

    def _adopt(self, manifest: Manifest) -> None:
        """The old owners' part of rerouting checkpoint `manifest` is durable: take over the key
        groups that moved here, and go on (`master.migrations`, step 5)."""
        adopted = self.owner.adopt(manifest)
        if adopted is not None:
            self.inbox.extend(adopted.queries)

    @property
    def key_groups(self) -> KeyGroups:
        return self.owner.key_groups

    # -- metrics ---------------------------------------------------------------------------------
    def metrics(self) -> tuple[OperatorMetrics, ...]:
        return self.chain.metrics()

    def task_metrics(self) -> TaskMetrics:
        """The counters, the time spent and the input queues, for live metrics (`runtime.metrics`)."""
        now, times = time.perf_counter(), self.times
        return TaskMetrics(self.id, self.metrics(), tuple(self.chain.watermarks_seen), times.busy_s,
                           times.held_s(now), now - times.opened_at, *self.gate.queued())
