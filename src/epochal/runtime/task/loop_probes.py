"""A task's part in a loop: termination probes, and a loop head's replay of its restored log.

Termination: a head starts probe rounds round its loop, members forward them; the job master
decides from the heads' verdicts (`master.loop_termination`, which says why no single head
can). Snapshots: ABS §4.3, Algorithm 2, taken as an unaligned cut of the head (`task.loop_cut`).
"""

from __future__ import annotations

from collections.abc import Callable

from ..operators import IterationHeadOperator
from ..wire.elements import LoopProbe
from .chain import OperatorChain
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
    """A task's part in a loop: its probes in loop termination and, at a loop head, the replay of
    the restored log (the head's cut itself: `task.loop_cut`).

    Args:
        head: the loop head operator, if the task heads a loop.
        back_edges: the head's inputs that close the loop.
        loop_inputs: a loop member's inputs from inside the loop (back-edges included).
        num_inputs: all of the task's inputs.
        output: where probes go round the loop.
        verdict: sends a head's verdict on a probe round to the job master: `(round, clean)`.
    """

    def __init__(self, head: IterationHeadOperator | None, back_edges: frozenset[int], loop_inputs: frozenset[int],
                 num_inputs: int, output: OutputGate, verdict: Callable[[int, bool], None]) -> None:
        self.head = head
        self.back_edges = back_edges
        self.probes = LoopProbes(head is not None, back_edges, loop_inputs, num_inputs)
        self.output = output
        self.verdict = verdict

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

    def on_batch(self) -> None:
        """The task processes a batch: it was active."""
        self.probes.active = True
