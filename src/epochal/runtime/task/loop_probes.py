"""A task's part in its loops: probe rounds per loop scope, a head's event time, and its replay.

A head sends probes round its loop, one round at a time; every task in the loop forwards a round
once it arrived on all its inputs in that loop (`plan.loops.ScopeInputs`), marked active if the
task processed anything since it forwarded the round before. Rounds serve two ends:

- **termination**: once a head's input ended, it reports each round's verdict to the job
  master, which ends the loop after a round every head came back clean from
  (`master.loop_termination`, which says why no single head can decide);
- **progress**: a head with event time (`iterate(timestamp=...)`) runs rounds all along, and
  each round that comes back lets its watermark move on (`task.loop_clock`).

A task may be in several loops, nested (dissertation ch. 6, structured loops): it keeps a round
counter per scope, and a probe names its loop. Snapshots: ABS §4.3, Algorithm 2, taken as an
unaligned cut of the head (`task.loop_cut`).
"""

from __future__ import annotations

import math
from collections.abc import Callable

from ...plan.loops import ScopeInputs
from ..clock import Clock
from ..operators import IterationHeadOperator
from ..watermarks import WatermarkAdvance
from ..wire.elements import Batch, LoopProbe
from .chain import OperatorChain
from .loop_clock import LoopClock
from .output_gate import OutputGate

ROUND_PAUSE = 0.01  # seconds between rounds of an event-time loop that has nothing to tell


class ScopeRounds:
    """One task's part in the rounds of one loop.

    Args:
        loop: the loop's id (its head's vertex).
        is_head: the task heads this loop: it starts rounds and judges them.
        inputs: the task's inputs in the loop (the head's: its back edges), and which lag.
        outside: the task's inputs from outside the loop: while any is open, records may come
            in at any time, so the task counts as active.
    """

    def __init__(self, loop: int, is_head: bool, inputs: ScopeInputs, outside: frozenset[int]) -> None:
        self.loop = loop
        self.is_head = is_head
        self.required = inputs.required
        self.lagged = inputs.lagged
        self.outside = outside
        self.active = False
        self.in_flight = False
        self._round = 0  # the head's last started round; a member's last forwarded one
        self._arrivals: dict[int, list[LoopProbe]] = {}
        self._lag_seen = dict.fromkeys(self.lagged, 0)
        self._lag_active = False
        self._lag_low = math.inf

    def start_round(self) -> LoopProbe:
        """A head starts its next round."""
        self._round += 1
        self.in_flight = True
        self.active = False
        return LoopProbe(self._round, False, self.loop)

    def on_probe(self, channel: int, probe: LoopProbe, ended: frozenset[int], bound: float
                 ) -> list[tuple[LoopProbe, LoopProbe]] | LoopProbe | None:
        """A probe of this loop arrived on input `channel`; `ended` are the task's ended inputs,
        `bound` what the task adds to `low` (an inner head's bound, else +inf).

        Returns, for a member, the rounds now ready to forward (in order); for a head, the
        round that came back, with `active` and `low` combined over its back edges; else None.
        """
        if channel in self.lagged:
            self._lag_seen[channel] = max(self._lag_seen[channel], probe.round)
            self._lag_active = self._lag_active or probe.active
            self._lag_low = min(self._lag_low, probe.low)
        elif channel in self.required:
            self._arrivals.setdefault(probe.round, []).append(probe)
        else:
            return None
        if self.is_head:
            return self._returned(ended)
        return self._ready(ended, bound)

    def _returned(self, ended: frozenset[int]) -> LoopProbe | None:
        arrivals = self._arrivals.get(self._round, [])
        if not self.in_flight or len(arrivals) < len(self.required - ended):
            return None
        del self._arrivals[self._round]
        self.in_flight = False
        active = self.active or any(p.active for p in arrivals)
        return LoopProbe(self._round, active, self.loop, min((p.low for p in arrivals), default=math.inf))

    def _ready(self, ended: frozenset[int], bound: float) -> list[tuple[LoopProbe, LoopProbe]]:
        """The rounds ready to go on, each twice: for the edges leaving the loop the task heads
        (with what came round its back edges, and its bound), and for the edges into that loop
        (without them: they would go round it again, and a flag or a bound once set would
        circulate there for ever)."""
        ready: list[tuple[LoopProbe, LoopProbe]] = []
        expected = len(self.required - ended)
        while True:
            nxt = self._round + 1
            arrivals = self._arrivals.get(nxt, [])
            if len(arrivals) < expected or not expected:
                return ready
            if any(seen < nxt - 1 for ch, seen in self._lag_seen.items() if ch not in ended):
                return ready
            del self._arrivals[nxt]
            self._round = nxt
            active = any(p.active for p in arrivals) or self.active or not self.outside <= ended
            low = min(p.low for p in arrivals)
            full = LoopProbe(nxt, active or self._lag_active, self.loop, min(low, self._lag_low, bound))
            self.active, self._lag_active, self._lag_low = False, False, math.inf
            ready.append((full, LoopProbe(nxt, active, self.loop, low)))


class TaskLoop:
    """A task's part in its loops: rounds per scope; for a head, its event time and its replay.

    Args:
        head: the loop head operator, if the task heads a loop.
        scopes: per loop the task is in (by head vertex), its rounds.
        own: the loop the task heads, if any.
        clock: the head's event time, if its loop has one.
        output: where probes go round the loops.
        verdict: sends a head's verdict on a round to the job master: `(round, clean)`.
        time: the runtime's clock (an event-time head paces rounds that have nothing to tell).
    """

    def __init__(self, head: IterationHeadOperator | None, scopes: dict[int, ScopeRounds], own: int | None,
                 clock: LoopClock | None, output: OutputGate, verdict: Callable[[int, bool], None],
                 time: Clock) -> None:
        self.head = head
        self.scopes = scopes
        self.own = scopes.get(own) if own is not None else None
        self.clock = clock
        self.output = output
        self.verdict = verdict
        self.time = time
        self._resume_at = -math.inf

    def replay(self, chain: OperatorChain) -> None:
        """Feed the restored loop log back into the loop before anything else (ABS §4.3)."""
        if self.head is not None and self.head.replay:
            batches, self.head.replay = self.head.replay, []
            for batch in batches:
                self.on_batch(batch)
                chain.process(batch)

    @property
    def in_flight(self) -> bool:
        return self.own is not None and self.own.in_flight

    def wants_round(self, draining: bool, idle: bool) -> bool:
        """Whether the head should start a round now: a draining head whose input is idle (to
        end the loop), an event-time head all along (paced when nothing is to be told)."""
        if self.own is None or self.own.in_flight:
            return False
        if self.clock is None:
            return draining and idle
        return self.time.now() >= self._resume_at

    def next_round_at(self) -> float | None:
        """When a paced event-time head starts its next round."""
        if self.clock is None or self.own is None or self.own.in_flight:
            return None
        return self._resume_at if self._resume_at > -math.inf else None

    def start_round(self) -> None:
        assert self.own is not None
        if self.clock is not None:
            self.clock.round_started()
        self.output.broadcast_loop(self.own.loop, self.own.start_round())

    def on_batch(self, batch: Batch | None = None) -> None:
        """The task processes a batch (a head: `batch`, which it admits into its loop)."""
        for scope in self.scopes.values():
            scope.active = True
        if self.clock is not None and batch is not None:
            self.clock.admit(batch)

    def on_probe(self, channel: int, probe: LoopProbe, ended: frozenset[int], draining: bool
                 ) -> WatermarkAdvance | None:
        """A probe arrived; returns the watermark an event-time head emits now, if any."""
        scope = self.scopes.get(probe.loop)
        if scope is None:
            return None
        bound = self.clock.bound if self.clock is not None and scope is not self.own else math.inf
        outcome = scope.on_probe(channel, probe, ended, bound)
        if isinstance(outcome, list):
            for full, into_own in outcome:
                self.output.broadcast_loop(scope.loop, full, into_own)
            return None
        if outcome is None:
            return None
        if draining:  # the job master decides the loop's end
            self.verdict(outcome.round, not outcome.active)
        if self.clock is None:
            return None
        advance = self.clock.round_ended(outcome.low)
        pause = not self.clock.wants_round() and not draining
        self._resume_at = self.time.now() + (ROUND_PAUSE if pause else 0.0)
        return advance
