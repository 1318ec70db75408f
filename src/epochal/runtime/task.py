"""A task: one subtask of one job vertex, running its chain of operators step by step.

A task never blocks. The host calls `step()` whenever `is_runnable()`; a step handles the
control messages that arrived, fires due timers, and processes at most one element from one
input (or one batch from its source). So a host can interleave many tasks on one event loop,
and the in-process executor can interleave them from a seed and replay a run exactly.

Checkpointing follows ABS §4.2, Algorithm 1: barriers are aligned by `BarrierAligner`; when the
last input delivers the barrier, the task fixes its state (synchronous, copy-on-write), forwards
the barrier, and hands serialisation and upload to the host's background runner; the
acknowledgement goes to the coordinator when the files are durable.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Callable, Protocol, Sequence

import pyarrow as pa

from ..config import StateConfig
from ..plan.job_graph import JobVertex, TaskId
from ..state.keygroups import KeyGroupRange, key_group_range
from ..state.storage import CheckpointStorage, Manifest, TaskCheckpointStats
from .aligner import AlignStep, BarrierAligner
from .batches import batch_len
from .clock import Clock
from .elements import END_OF_INPUT, Barrier, Batch, EndOfInput, LoopProbe, Watermark, is_batch
from .messages import (
    AcknowledgeCheckpoint,
    DeclineCheckpoint,
    EndLoop,
    InputsEnded,
    LoopRoundEnded,
    NotifyCheckpointAborted,
    NotifyCheckpointComplete,
    OperatorMetrics,
    TaskFinished,
    TriggerCheckpoint,
)
from .operators import (
    IterationHeadOperator,
    LoopLog,
    OperatorContext,
    OperatorSnapshot,
    RuntimeOperator,
    SourceOperator,
    create_operator,
)
from .partition import Partitioner
from .snapshots import read_operator_restore, serialise_small_snapshots, write_task_snapshot


# Arrow batches queued on one channel are joined up to this many rows (`Task._coalesce_arrow`).
# Rows are cheap in columnar operators; the cap bounds the copy and the batch's memory.
ARROW_JOIN_ROWS = 65_536
# Steps a host lets a runnable task take in a row before the next task's turn (`run_steps`).
# One step each would move every batch on at once: queues would never hold more than one, and
# the consumer would never get a backlog to join (`_coalesce*`). A few in a row let it, at a
# latency of a few steps; the channel's capacity bounds the backlog either way.
STEPS_IN_A_ROW = 4


class InputChannel(Protocol):
    def poll(self) -> Any: ...
    def peek(self) -> Any: ...
    def __len__(self) -> int: ...


class OutputChannel(Protocol):
    def has_capacity(self) -> bool: ...
    def send(self, element: Any) -> None: ...


class OutputGate:
    """The task's outgoing edges: a partitioner and the channels it routes to, per edge."""

    def __init__(
        self,
        edges: Sequence[tuple[Partitioner, Sequence[OutputChannel]]],
        loop_edges: frozenset[int] = frozenset(),
    ) -> None:
        self.edges = list(edges)
        self.channels = [ch for _, chans in self.edges for ch in chans]
        # channels of edges inside a loop: where termination probes go
        self.loop_channels = [ch for i, (_, chans) in enumerate(self.edges) if i in loop_edges for ch in chans]

    def emit(self, batch: Batch) -> None:
        for partitioner, channels in self.edges:
            for target, piece in partitioner.split(batch):
                channels[target].send(piece)

    def broadcast(self, element: Any) -> None:
        for ch in self.channels:
            ch.send(element)

    def broadcast_loop(self, element: Any) -> None:
        for ch in self.loop_channels:
            ch.send(element)

    def has_capacity(self) -> bool:
        for ch in self.channels:
            if not ch.has_capacity():
                return False
        return True


class TaskState(Enum):
    RUNNING = "running"
    DRAINING = "draining"  # a loop head whose input ended: it runs until its loop is empty
    ENDED = "ended"  # inputs ended; waits for the final checkpoint to commit
    FINISHED = "finished"


class BackgroundRunner(Protocol):
    """Runs the asynchronous part of checkpoints off the processing path."""

    def submit(self, fn: Callable[[], None]) -> None: ...


@dataclass(slots=True)
class _PendingLoopSnapshot:
    """A loop head's checkpoint waiting for its barrier to come back on every back-edge."""

    checkpoint_id: int
    waiting: set[int]
    snapshots: list[tuple[str, OperatorSnapshot]]
    alignment_ms: float
    sync_ms: float
    log: list[Batch] = field(default_factory=list)


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
    send: Callable[[Any], None]  # to the job manager
    background: BackgroundRunner
    state: StateConfig = StateConfig()  # the keyed-state backend and incremental checkpoints


class Task:
    """One subtask of a vertex: inputs → aligner → operator chain → output gate."""

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
        self.inputs = list(inputs)
        self.output = output
        self.inbox: deque[Any] = deque()
        self.state = TaskState.RUNNING
        self.aligner = BarrierAligner(len(self.inputs), back_edges)
        self.back_edges = back_edges
        self.loop_inputs = loop_inputs  # inputs from inside a loop (back-edges included)
        self.key_groups: KeyGroupRange = key_group_range(
            setup.task_id.subtask, setup.vertex.parallelism, setup.max_parallelism
        )
        self.chain: list[RuntimeOperator] = [create_operator(spec) for spec in setup.vertex.chain]
        self.source: SourceOperator | None = (
            self.chain[0] if isinstance(self.chain[0], SourceOperator) else None
        )
        self.records_in = [0] * len(self.chain)
        self.records_out = [0] * len(self.chain)
        self.last_checkpoint = 0
        self.last_notified = 0  # the newest checkpoint this task knows to be complete
        self._next_input = 0
        self._alignment_started: float | None = None
        self.head: IterationHeadOperator | None = (
            self.chain[0] if isinstance(self.chain[0], IterationHeadOperator) else None
        )
        self._loop_snapshots: dict[int, _PendingLoopSnapshot] = {}
        self._dirty = False  # processed records since the last termination probe passed
        self._probe_round = 0
        self._probe_in_flight = False
        self._probe_arrivals: dict[int, list[bool]] = {}
        self._halted_for: int | None = None  # a synchronous checkpoint this source waits for

    # -- lifecycle -------------------------------------------------------------------------------
    def open(self) -> None:
        """Open every operator and restore its state from the checkpoint, if any."""
        ctx = OperatorContext(
            self.id.subtask, self.setup.vertex.parallelism, self.setup.max_parallelism,
            self.key_groups, self.setup.clock, self.setup.state, self.name,
        )
        manifest, storage = self.setup.restore_from, self.setup.storage
        for op in self.chain:
            op.open(ctx)
            keyed, states = None, []
            if manifest is not None:  # storage may be None: a savepoint is read where it lies
                keyed, states = read_operator_restore(
                    storage, manifest, op.uid, self.key_groups, self.setup.max_parallelism
                )
            op.restore(keyed, states)  # also on a fresh start: sinks clean up after a failed run
        if manifest is not None:
            self.last_checkpoint = self.last_notified = manifest.checkpoint_id
            self.aligner.last_completed = manifest.checkpoint_id
        if not self.inputs and self.source is None:
            raise RuntimeError(f"task {self.name} has neither inputs nor a source")

    def close(self) -> None:
        for op in self.chain:
            try:
                op.close()
            except Exception:  # closing after a failure must not mask the failure
                pass

    # -- scheduling ------------------------------------------------------------------------------
    def next_timer(self) -> float | None:
        times = [t for op in self.chain if (t := op.next_timer()) is not None]
        return min(times) if times else None

    def is_runnable(self) -> bool:
        if self.state is TaskState.FINISHED:
            return False
        if self.inbox or (self.head is not None and self.head.replay):
            return True
        if self.state is TaskState.ENDED or not self.output.has_capacity():
            return False
        if self.state is TaskState.DRAINING and not self._probe_in_flight:
            return True
        timer = self.next_timer()
        if timer is not None and timer <= self.setup.clock.now():
            return True
        if self.source is not None:
            return self._halted_for is None
        return self._readable_input() is not None

    def _readable_input(self) -> int | None:
        n = len(self.inputs)
        if self.head is not None:  # piled-up feedback first, so a heavy loop drains (L6827)
            for i in self.back_edges:
                if len(self.inputs[i]) > self.head.feedback_threshold and not self.aligner.is_blocked(i):
                    return i
        for i in range(n):
            idx = (self._next_input + i) % n
            if self.inputs[idx] and not self.aligner.is_blocked(idx):
                return idx
        return None

    def run_steps(self, limit: int = STEPS_IN_A_ROW) -> int:
        """Step while runnable, at most `limit` times; returns how many steps were taken."""
        for taken in range(limit):
            if not self.is_runnable():
                return taken
            self.step()
        return limit

    def step(self) -> None:
        """Do one unit of work; exceptions propagate to the host, which fails the job."""
        if self.head is not None and self.head.replay:
            self._replay_loop_log()
        while self.inbox:
            self._on_control(self.inbox.popleft())
            if self.state is TaskState.FINISHED:
                return
        if self.state not in (TaskState.RUNNING, TaskState.DRAINING) or not self.output.has_capacity():
            return
        if self.state is TaskState.DRAINING and not self._probe_in_flight and self._readable_input() is None:
            self._send_probe()
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

    def _step_source(self) -> None:
        assert self.source is not None
        batch = self.source.poll(self.setup.batch_size)
        if batch is None:
            self._end_input()
            return
        n = batch_len(batch)
        self.records_out[0] += n
        self._run_chain(1, batch)

    def _step_input(self) -> None:
        idx = self._readable_input()
        if idx is None:
            return
        self._next_input = (idx + 1) % len(self.inputs)
        channel = self.inputs[idx]
        element = channel.poll()
        if type(element) is list and len(element) < self.setup.batch_size:
            element = self._coalesce(channel, element)
        elif type(element) is pa.RecordBatch and element.num_rows < ARROW_JOIN_ROWS:
            element = self._coalesce_arrow(channel, element)
        if is_batch(element):
            self._dirty = True
            if idx in self.back_edges:
                for pending in self._loop_snapshots.values():
                    if idx in pending.waiting:
                        pending.log.append(element)
            self._run_chain(0, element)
        elif type(element) is Barrier:
            if idx not in self.back_edges and not self.aligner.is_aligning:
                self._alignment_started = time.perf_counter()
            step = self.aligner.on_barrier(idx, element)
            self._decline_abandoned()
            if step is AlignStep.SNAPSHOT:
                self._checkpoint(element)
            elif step is AlignStep.LOOP_RETURN:
                self._loop_barrier_returned(idx, element.checkpoint_id)
        elif type(element) is EndOfInput:
            if self.aligner.on_end_of_input(idx) is AlignStep.SNAPSHOT:
                assert self.aligner.completed is not None
                self._checkpoint(self.aligner.completed)
            if idx in self.back_edges:
                for cid in list(self._loop_snapshots):
                    self._loop_barrier_returned(idx, cid)
            if self.aligner.all_ended:
                if self.state is not TaskState.ENDED:
                    self._end_input()
            elif self.head is not None and self.aligner.regular_ended and self.state is TaskState.RUNNING:
                # The loop's input ended; the loop itself may still hold records.
                self.state = TaskState.DRAINING
                self.setup.send(InputsEnded(self.id))
        elif type(element) is LoopProbe:
            self._on_probe(element)
        elif type(element) is Watermark:
            pass  # event time lands with windows; nothing consumes watermarks yet
        else:
            raise RuntimeError(f"task {self.name}: unexpected element {element!r}")

    def _coalesce(self, channel: InputChannel, batch: list[Any]) -> list[Any]:
        """Join the record lists queued right behind `batch` on the same channel, up to a batch.

        Each key-group shuffle cuts a batch into one piece per consumer, so after a few shuffles
        pieces are small and per-batch costs (a step, a chain pass, key extraction, routing)
        dominate. Joining only *consecutive* lists of one channel keeps FIFO order and never
        moves a record across a barrier or any other in-band event.
        """
        limit = self.setup.batch_size
        nxt = channel.peek()
        if type(nxt) is not list or len(batch) + len(nxt) > limit:
            return batch
        merged = list(batch)  # never extend a list another channel or operator may share
        while type(nxt) is list and len(merged) + len(nxt) <= limit:
            merged.extend(channel.poll())
            nxt = channel.peek()
        return merged

    def _coalesce_arrow(self, channel: InputChannel, batch: pa.RecordBatch) -> pa.RecordBatch:
        """Join the Arrow batches of one schema queued right behind `batch`, up to `ARROW_JOIN_ROWS`.

        As `_coalesce` for record lists, for the columnar path: a vectorized operator pays a
        fixed cost per batch (key encoding, index lookup, ranking, about 0.4 ms on the word
        count), so a backlog of small batches is worth one copy into a larger one. Only what is
        already queued is joined: nothing waits for more input.
        """
        parts, rows = [batch], batch.num_rows
        nxt = channel.peek()
        while type(nxt) is pa.RecordBatch and rows + nxt.num_rows <= ARROW_JOIN_ROWS and nxt.schema.equals(batch.schema):
            parts.append(channel.poll())
            rows += nxt.num_rows
            nxt = channel.peek()
        if len(parts) == 1:
            return batch
        return pa.Table.from_batches(parts).combine_chunks().to_batches()[0]  # pyarrow < 19: no concat_batches

    def _fire_timers(self) -> None:
        now = self.setup.clock.now()
        for i, op in enumerate(self.chain):
            timer = op.next_timer()
            if timer is not None and timer <= now:
                out = op.on_processing_time(now)
                if out is not None:
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
        """Feed the restored loop log back into the loop before anything else (ABS §5)."""
        assert self.head is not None
        batches, self.head.replay = self.head.replay, []
        for batch in batches:
            self._run_chain(0, batch)

    def _send_probe(self) -> None:
        self._probe_round += 1
        self._probe_in_flight = True
        self._dirty = False
        self.output.broadcast_loop(LoopProbe(self._probe_round, False))

    def _on_probe(self, probe: LoopProbe) -> None:
        arrivals = self._probe_arrivals.setdefault(probe.round, [])
        arrivals.append(probe.dirty)
        expected = len(self.back_edges - self.aligner.ended) if self.head is not None else len(self.loop_inputs)
        if len(arrivals) < expected:
            return
        del self._probe_arrivals[probe.round]
        if self.head is not None:
            self._probe_in_flight = False
            clean = not any(arrivals) and not self._dirty
            self.setup.send(LoopRoundEnded(self.id, probe.round, clean))  # the job manager decides
            return
        outside = set(range(len(self.inputs))) - self.loop_inputs
        dirty = any(arrivals) or self._dirty or not outside <= self.aligner.ended
        self._dirty = False
        self.output.broadcast_loop(LoopProbe(probe.round, dirty))

    # -- checkpoints -----------------------------------------------------------------------------
    def _decline_abandoned(self) -> None:
        while self.aligner.abandoned:
            cid = self.aligner.abandoned.pop()
            self.setup.send(DeclineCheckpoint(self.id, cid, "alignment abandoned for a newer barrier"))

    def _checkpoint(self, barrier: Barrier) -> None:
        """Fix state, forward the barrier, and write the snapshot in the background.

        The barrier says which checkpoint was complete when it was triggered. On Spark the
        notification of that completion travels on another connection than the barrier and may
        arrive later; acting on it first means incremental state never builds on a checkpoint
        that retention may already have dropped (and commits nothing that is not complete).
        """
        if barrier.completed > self.last_notified:
            self._notify_complete(barrier.completed)
        alignment_ms = 0.0
        if self._alignment_started is not None:
            alignment_ms = (time.perf_counter() - self._alignment_started) * 1000
            self._alignment_started = None
        started = time.perf_counter()
        snapshots = [(op.uid, op.snapshot(barrier.checkpoint_id)) for op in self.chain]
        if self.state in (TaskState.RUNNING, TaskState.DRAINING):
            self.output.broadcast(barrier)
        # after the barrier left: downstream aligns while this task serialises a small state
        serialise_small_snapshots(snapshots, self.setup.state.inline_snapshot_entries)
        sync_ms = (time.perf_counter() - started) * 1000
        self.last_checkpoint = barrier.checkpoint_id
        open_back_edges = set(self.back_edges) - self.aligner.ended
        if self.head is not None and open_back_edges and self.state is not TaskState.ENDED:
            # ABS Algorithm 2: the state copy is fixed; log feedback until the barrier is back.
            self._loop_snapshots[barrier.checkpoint_id] = _PendingLoopSnapshot(
                barrier.checkpoint_id, open_back_edges, snapshots, alignment_ms, sync_ms
            )
            return
        self._write_snapshot(barrier.checkpoint_id, snapshots, alignment_ms, sync_ms, barrier.synchronous)

    def _loop_barrier_returned(self, channel: int, checkpoint_id: int) -> None:
        pending = self._loop_snapshots.get(checkpoint_id)
        if pending is None:
            return
        pending.waiting.discard(channel)
        if pending.waiting:
            return
        del self._loop_snapshots[checkpoint_id]
        assert self.head is not None
        log = OperatorSnapshot(state=LoopLog(tuple(pending.log)))
        snapshots = [(uid, log if uid == self.head.uid else snap) for uid, snap in pending.snapshots]
        self._write_snapshot(checkpoint_id, snapshots, pending.alignment_ms, pending.sync_ms)

    def _write_snapshot(
        self,
        checkpoint_id: int,
        snapshots: list[tuple[str, OperatorSnapshot]],
        alignment_ms: float,
        sync_ms: float,
        synchronous: bool = False,
    ) -> None:
        setup, task_id, key_groups = self.setup, self.id, self.key_groups

        def write_and_acknowledge() -> None:
            began = time.perf_counter()
            try:
                states, size = write_task_snapshot(
                    setup.storage, checkpoint_id, task_id, key_groups, snapshots
                )
            except Exception as exc:
                setup.send(DeclineCheckpoint(task_id, checkpoint_id, f"writing state failed: {exc}"))
                return
            stats = TaskCheckpointStats(
                str(task_id), alignment_ms, sync_ms, (time.perf_counter() - began) * 1000, size
            )
            setup.send(AcknowledgeCheckpoint(task_id, checkpoint_id, states, stats))

        if synchronous:  # Naiad-style: the task does nothing else until its state is written
            write_and_acknowledge()
        else:
            setup.background.submit(write_and_acknowledge)

    def _on_control(self, message: Any) -> None:
        if type(message) is TriggerCheckpoint:
            if message.checkpoint_id <= self.last_checkpoint:
                return  # the barrier reached this task through its inputs already
            if self.source is not None and self.state is TaskState.RUNNING:
                self._alignment_started = None
                self._checkpoint(
                    Barrier(message.checkpoint_id, message.timestamp, message.synchronous, message.completed)
                )
                if message.synchronous:
                    self._halted_for = message.checkpoint_id
            elif self.state in (TaskState.ENDED, TaskState.DRAINING):
                self._checkpoint(Barrier(message.checkpoint_id, message.timestamp, False, message.completed))
        elif type(message) is EndLoop:
            if self.state is TaskState.DRAINING:
                self._end_input()  # every head saw a clean round: the loop is empty
        elif type(message) is NotifyCheckpointAborted:
            if self._halted_for == message.checkpoint_id:
                self._halted_for = None
        elif type(message) is NotifyCheckpointComplete:
            if self._halted_for is not None and self._halted_for <= message.checkpoint_id:
                self._halted_for = None
            self._notify_complete(message.checkpoint_id)
            if message.is_final:
                self.state = TaskState.FINISHED
                self.close()
                self.setup.send(TaskFinished(self.id, self.metrics()))
        else:
            raise RuntimeError(f"task {self.name}: unexpected control message {message!r}")

    def _notify_complete(self, checkpoint_id: int) -> None:
        if checkpoint_id <= self.last_notified:
            return  # learnt from a barrier already
        self.last_notified = checkpoint_id
        for op in self.chain:
            op.notify_checkpoint_complete(checkpoint_id)

    def metrics(self) -> tuple[OperatorMetrics, ...]:
        return tuple(
            OperatorMetrics(op.name, self.records_in[i], self.records_out[i])
            for i, op in enumerate(self.chain)
        )
