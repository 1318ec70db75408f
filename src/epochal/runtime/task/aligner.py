"""Align checkpoint barriers across one task's input channels.

Implements ABS §4.2, Algorithm 1 (acyclic graphs), the dissertation's epoch alignment
(§3.4, Algorithm 6): an input is blocked once it delivered the barrier of checkpoint n; when
every input has delivered it, the task snapshots its state, forwards the barrier and unblocks
all inputs. Pure: no I/O, no clock; the task loop drives it and asks `is_blocked` before reading.

Cycles (ABS §4.3, Algorithm 2): barriers are aligned over the *regular* channels only; a
back-edge is never blocked, and a barrier arriving on it returns `LOOP_RETURN`. A loop head's
task hands its barriers to no aligner: it takes them ahead of its queues, an unaligned cut of
all its inputs (`task.loop_cut`); the tasks of a loop's body align theirs here.

At-least-once (`CheckpointConfig(mode="at_least_once")`, barriers with `Alignment.NONE`): the
aligner only counts the barriers and blocks nothing, so records behind an early barrier are in
the snapshot *and* replayed after a restore (Flink's barrier tracking). Unaligned barriers are
taken by `runtime.unaligned` instead; a task that cannot take them so (a loop's) aligns them here.

Each step is O(1) whatever the number of inputs (a keyed edge gives a task one per upstream
subtask): the aligner counts the inputs that delivered the barrier or ended instead of comparing
sets, and counts the times it unblocked inputs (`releases`), so the input gate knows when the
inputs it set aside may be read again without asking each.

Departures: a channel that has ended (end-of-input) counts as having delivered every barrier, so
bounded inputs do not stall checkpoints; a newer barrier abandons an alignment in progress (the
older checkpoint was aborted), and an older one is dropped.
"""

from __future__ import annotations

from enum import Enum

from ..wire.elements import Alignment, Barrier


class AlignStep(Enum):
    """What the task does after handing a barrier or an end-of-input to the aligner."""

    CONTINUE = "continue"  # keep reading the unblocked inputs
    SNAPSHOT = "snapshot"  # every input delivered the barrier: snapshot, forward, carry on
    DROP = "drop"  # a stale barrier of an abandoned checkpoint
    LOOP_RETURN = "loop_return"  # the barrier came back round a loop, on a back-edge


class BarrierAligner:
    """Barrier alignment state for the inputs of one task."""

    def __init__(self, num_channels: int, back_edges: frozenset[int] = frozenset()) -> None:
        self.num_channels = num_channels
        self.back_edges = back_edges
        self.regular = frozenset(range(num_channels)) - back_edges
        self._blocked: set[int] = set()
        self._arrived: set[int] = set()  # inputs that delivered the pending barrier
        self._ended: set[int] = set()
        self._regular_ended = 0  # regular inputs that ended (none of them is in `_arrived`)
        self._ended_view: frozenset[int] | None = frozenset()
        self.releases = 0  # times blocked inputs were unblocked (`InputGate` reads them again)
        self.pending: Barrier | None = None
        self.last_completed = 0
        self.completed: Barrier | None = None  # the barrier of the last SNAPSHOT step
        self.abandoned: list[int] = []  # checkpoints given up for a newer one; the task declines them
        self._aborted: set[int] = set()  # aborted before their first barrier came: dropped when it does

    def is_blocked(self, channel: int) -> bool:
        return channel in self._blocked

    @property
    def is_aligning(self) -> bool:
        return self.pending is not None

    @property
    def all_ended(self) -> bool:
        return len(self._ended) == self.num_channels

    @property
    def ended(self) -> frozenset[int]:
        view = self._ended_view
        if view is None:
            view = self._ended_view = frozenset(self._ended)
        return view

    @property
    def regular_ended(self) -> bool:
        return self._regular_ended == len(self.regular)

    def on_barrier(self, channel: int, barrier: Barrier) -> AlignStep:
        if channel in self.back_edges:
            return AlignStep.LOOP_RETURN
        cid = barrier.checkpoint_id
        if cid <= self.last_completed or (self.pending is not None and cid < self.pending.checkpoint_id):
            return AlignStep.DROP
        if self._aborted and cid in self._aborted and barrier.reroute is None and not barrier.patch:
            return AlignStep.DROP
        if self.pending is not None and cid > self.pending.checkpoint_id:
            self.abandon()
        if self.pending is None:
            self.pending = barrier
        self._arrived.add(channel)
        if barrier.alignment is not Alignment.NONE:
            self._blocked.add(channel)
        return self._maybe_complete()

    def aborted(self, checkpoint_id: int) -> None:
        """The job master aborted `checkpoint_id` before its first barrier came here: a barrier of
        it that still comes is dropped, not aligned, since the input that would complete it may be
        a lost worker's (survivors run on: `runtime.master.survivors`), and the alignment would
        hold the other inputs until a newer checkpoint. Barriers that move key groups or patch
        code are aligned still: every task must switch at them."""
        if checkpoint_id > self.last_completed:
            self._aborted = {c for c in self._aborted if c > self.last_completed}
            self._aborted.add(checkpoint_id)

    def abandon(self) -> None:
        """Give up the alignment in progress (a newer checkpoint started); the task declines it."""
        if self.pending is not None:
            self.abandoned.append(self.pending.checkpoint_id)
            self.pending = None
        self._release()

    def _release(self) -> None:
        if self._blocked:
            self._blocked.clear()
            self.releases += 1
        self._arrived.clear()

    def on_end_of_input(self, channel: int) -> AlignStep:
        if channel not in self._ended:
            self._ended.add(channel)
            self._ended_view = None
            if channel in self.regular:
                self._regular_ended += 1
        self._blocked.discard(channel)
        self._arrived.discard(channel)
        return self._maybe_complete() if self.pending is not None else AlignStep.CONTINUE

    def _maybe_complete(self) -> AlignStep:
        if len(self._arrived) + self._regular_ended < len(self.regular):
            return AlignStep.CONTINUE
        assert self.pending is not None
        self.completed = self.pending
        self.last_completed = self.pending.checkpoint_id
        self.pending = None
        self._release()
        return AlignStep.SNAPSHOT
