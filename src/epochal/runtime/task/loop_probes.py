"""A task's part in a loop: termination probes, and a loop head's snapshots of its back edges.

Termination: a head starts probe rounds round its loop, members forward them; the job master
decides from the heads' verdicts (`master.loop_termination`, which says why no single head
can). Snapshots: ABS §4.3, Algorithm 2 (the log itself: `in_flight.PendingSnapshots`).
"""

from __future__ import annotations

from collections.abc import Callable

from ..operators import IterationHeadOperator, LoopLog, OperatorSnapshot
from ..wire.elements import Batch, LoopProbe
from .chain import OperatorChain
from .checkpointer import Snapshots
from .in_flight import PendingSnapshot, PendingSnapshots
from .output_gate import OutputGate


class LoopProbes:
    """One task's part in loop termination: starting rounds (a head) or forwarding them.

    `active` is set whenever the task processes records; a probe forwarded (or a verdict sent)
    clears it, so each round reports whether the task processed anything since the last one.

    Args:
        is_head: the task heads a loop: it starts rounds and sends the verdicts to the job master.
        back_edges: the head's inputs that close the loop.
        loop_inputs: a loop member's inputs from inside the loop (back-edges included).
        num_inputs: all of the task's inputs.
    """

    def __init__(self, is_head: bool, back_edges: frozenset[int], loop_inputs: frozenset[int], num_inputs: int) -> None:
        self.is_head = is_head
        self.back_edges = back_edges
        self.loop_inputs = loop_inputs
        self.outside = frozenset(range(num_inputs)) - loop_inputs
        self.active = False
        self.in_flight = False
        self._round = 0
        self._arrivals: dict[int, list[bool]] = {}

    def start_round(self) -> LoopProbe:
        """A head whose input ended sends a probe round its loop."""
        self._round += 1
        self.in_flight = True
        self.active = False
        return LoopProbe(self._round, False)

    def on_probe(self, probe: LoopProbe, ended: frozenset[int]) -> LoopProbe | tuple[int, bool] | None:
        """A probe arrived on one loop input; `ended` are the task's inputs that have ended.

        Returns None until the round arrived on every open loop input; then, for a member, the
        probe to forward, and for a head, `(round, clean)`: its verdict for the job master.
        """
        arrivals = self._arrivals.setdefault(probe.round, [])
        arrivals.append(probe.active)
        expected = len(self.back_edges - ended) if self.is_head else len(self.loop_inputs)
        if len(arrivals) < expected:
            return None
        del self._arrivals[probe.round]
        if self.is_head:
            self.in_flight = False
            return probe.round, not any(arrivals) and not self.active
        active = any(arrivals) or self.active or not self.outside <= ended
        self.active = False
        return LoopProbe(probe.round, active)


class TaskLoop:
    """A task's part in a loop: its probes in loop termination and, at a loop head, the
    snapshots that log the back edges until the barrier came round (ABS §4.3, Algorithm 2).

    Args:
        head: the loop head operator, if the task heads a loop.
        back_edges: the head's inputs that close the loop.
        loop_inputs: a loop member's inputs from inside the loop (back-edges included).
        num_inputs: all of the task's inputs.
        output: where probes go round the loop.
        verdict: sends a head's verdict on a probe round to the job master: `(round, clean)`.
        write: writes a head's snapshot once the barrier came round.
    """

    def __init__(self, head: IterationHeadOperator | None, back_edges: frozenset[int], loop_inputs: frozenset[int],
                 num_inputs: int, output: OutputGate, verdict: Callable[[int, bool], None],
                 write: Callable[[int, Snapshots, float, float], None]) -> None:
        self.head = head
        self.back_edges = back_edges
        self.probes = LoopProbes(head is not None, back_edges, loop_inputs, num_inputs)
        self.snapshots = PendingSnapshots()
        self.output = output
        self.verdict = verdict
        self.write = write

    def replay(self, chain: OperatorChain) -> None:
        """Feed the restored loop log back into the loop before anything else (ABS §4.3)."""
        if self.head is not None and self.head.replay:
            batches, self.head.replay = self.head.replay, []
            for batch in batches:
                chain.process(batch)

    def on_probe(self, probe: LoopProbe, ended: frozenset[int]) -> None:
        outcome = self.probes.on_probe(probe, ended)
        if isinstance(outcome, LoopProbe):
            self.output.broadcast_loop(outcome)
        elif outcome is not None:  # a head's verdict: the job master decides
            self.verdict(*outcome)

    def returned(self, channel: int, checkpoint_id: int) -> None:
        """The barrier came back round on back edge `channel`."""
        self._done(self.snapshots.arrived(channel, checkpoint_id))

    def channel_ended(self, channel: int) -> None:
        if channel in self.back_edges:
            for pending in self.snapshots.channel_ended(channel):
                self._done(pending)

    def on_batch(self, idx: int, batch: Batch) -> None:
        """The task processes `batch` from input `idx`: it was active, and feedback is logged."""
        self.probes.active = True
        if idx in self.back_edges:
            self.snapshots.log(idx, batch)

    def hold(self, checkpoint_id: int, ended: frozenset[int], snapshots: Snapshots, alignment_ms: float,
             sync_ms: float) -> bool:
        """A head fixed its state while back edges are open: it logs them until the barrier came
        round, and writes then (Algorithm 2). False if the snapshot can be written now."""
        open_back_edges = set(self.back_edges) - ended
        if self.head is None or not open_back_edges:
            return False
        self.snapshots.hold(PendingSnapshot(checkpoint_id, open_back_edges, snapshots, alignment_ms, sync_ms))
        return True

    def _done(self, pending: PendingSnapshot | None) -> None:
        """Every back edge returned the barrier: the head's state is its logged feedback."""
        if pending is None:
            return
        assert self.head is not None
        log_state = OperatorSnapshot(state=LoopLog(tuple(batch for _, batch in pending.log)))
        snapshots = [(uid, log_state if uid == self.head.uid else snap) for uid, snap in pending.snapshots]
        self.write(pending.checkpoint_id, snapshots, pending.alignment_ms, pending.sync_ms)
