"""Event time through a loop: the head holds the watermark until the loop holds nothing older.

A watermark W(t) says no record older than t follows. A loop breaks that if it passes W(t) on
while records older than t still go round (they come out late, after it), and it deadlocks if
the head waits for a watermark from its own back edge (dissertation §6.3.2). The dissertation's
structured loops track progress per *context* (§6.3.3-6.3.4, Algorithms 10-14): records carry
an iteration counter per loop, and a context's watermark moves on once the loop terminated it.
Epochal's loops carry plain records, so the head tracks the context "event time <= t" by rounds
of the loop's probes instead, with the event time of what it admits (`iterate(timestamp=...)`):

- the head admits records from its input and its back edges, and notes the smallest event
  time it admitted since the current probe round began;
- a round that came back (its probe passed every task and channel of the loop) proves that
  every record in the loop now descends from a record admitted since the round began: what was
  in the loop before went ahead of the probe (FIFO channels), and either left or came back to
  a head during the round. With the loop's records keeping or increasing their event time
  (records derived inside a loop are no older than what they derive from), nothing in the loop
  is older than the smallest admitted since the round began, and nothing to come is older than
  the input's watermark;
- so at each round's end the head emits min(input watermark, just below the smallest admitted
  since the round began, the bounds the round collected from inner loops) into the loop, and it
  flows on to whatever lies after the loop: the context "event time <= t" has terminated there,
  and timers and windows at t after the loop fire once nothing of time t is left in it.

Nested loops: a round of an outer loop passes an inner loop once (the inner head waits on its
own back edges for the outer round before, `plan.loops.ScopeInputs`), so records may stay in
the inner loop behind the probe. The inner head therefore adds its *bound* to each outer probe
that passes it: the smallest event time admitted since its own last complete round began, which
everything in the inner loop is at least. A loop with event time holds rounds going while it
may hold records, so an inner bound is never stale for long; an outer loop with event time needs
it in every loop nested in it (`plan.compiler` refuses the job otherwise).

Records the head admits older than what it emitted break the assumption above; they are counted
as late (the head's `late_records`), as any operator counts records behind its watermark.
"""

from __future__ import annotations

import math

from ...plan.time import EventTime
from ..operators.base import RuntimeOperator, batch_timestamps
from ..watermarks import NO_WATERMARK, WatermarkAdvance
from ..wire.batches import batch_len
from ..wire.elements import Batch


class LoopClock:
    """A loop head's event time: the input's watermark, what it admitted, what it emitted.

    Args:
        event_time: where a record of the loop has its timestamp.
        head: the head operator: named in errors about records without a timestamp, and where
            records that come round late are counted (`late_records`).
    """

    def __init__(self, event_time: EventTime, head: RuntimeOperator) -> None:
        self.event_time = event_time
        self.head = head
        self.name = head.name
        self.input = NO_WATERMARK
        self.input_idle = False
        self.emitted = NO_WATERMARK
        self._since_round = math.inf  # smallest event time admitted since the current round began
        self._since_completed = math.inf  # ... since the last complete round began: the loop's bound
        self._round_open = False

    def admit(self, batch: Batch) -> None:
        """The head takes `batch` into the loop (from its input or a back edge)."""
        if not batch_len(batch):
            return
        times = batch_timestamps(self.name, self.event_time, batch)
        # just below the record: a watermark at its time would fire timers and windows at that
        # time downstream while it is still in the loop
        low = math.nextafter(float(times.min()), -math.inf)
        if low < self._since_round:
            self._since_round = low
        if low < self._since_completed:
            self._since_completed = low
        if low < self.emitted:
            self.head.late_records += int((times <= self.emitted).sum())

    def on_input(self, advance: WatermarkAdvance) -> None:
        """The head's input watermark moved (held here until a round proves the loop past it)."""
        self.input = max(self.input, advance.timestamp)
        self.input_idle = advance.idle

    @property
    def bound(self) -> float:
        """Nothing in the loop is older than this (+inf: the loop was empty at a round's end)."""
        return self._since_completed

    def wants_round(self) -> bool:
        """A round would tell something: the input moved past what was emitted, or the loop may
        still hold records (so its bound, which outer loops read, would rise)."""
        return self.input > self.emitted or self._since_completed < math.inf

    def round_started(self) -> None:
        self._since_round = math.inf
        self._round_open = True

    def round_ended(self, inner_low: float) -> WatermarkAdvance | None:
        """A round came back, with the bound of the inner loops it passed: the watermark to emit."""
        if not self._round_open:
            return None
        self._round_open = False
        self._since_completed = self._since_round
        candidate = min(self.input, self._since_round, inner_low)
        if candidate <= self.emitted:
            return None
        self.emitted = candidate
        return WatermarkAdvance(candidate, idle=self.input_idle and candidate == self.input)
