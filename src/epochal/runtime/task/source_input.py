"""A source task's input: its source operator, read a batch at a time.

A source takes no input from channels: it reads its splits (FLIP-27's reader), halts while a
synchronous checkpoint it triggered is under way (`CheckpointConfig(synchronous=True)`: nothing
is read between its barrier and the checkpoint's completion), takes the splits the job master
assigns as it finds them, and in a live rescale gives up or adopts splits at the rerouting
barrier (`runtime.splits`). After a fallback to an older checkpoint, it replays the epochs since
at their cuts (`state.replay`): a replayed checkpoint's trigger is held until the source reached
its cut.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ...plan.job_graph import JobVertex
from ...state.keygroups import RoutingTable
from ...state.manifest import Manifest
from ..operators import RuntimeOperator, SourceOperator
from ..splits import may_gain_splits
from ..watermarks import END_OF_TIME, NO_WATERMARK, WatermarkAdvance
from ..wire.batches import batch_len
from ..wire.elements import Watermark
from ..wire.messages import AdoptSplits, AssignSplits, NoMoreSplits, TriggerCheckpoint
from .chain import OperatorChain
from .key_group_owner import KeyGroupOwner
from .output_gate import OutputGate


class SourceInput:
    """The source at the head of a task's chain, and what halts or feeds it."""

    def __init__(self, source: SourceOperator, chain: OperatorChain, vertex: JobVertex,
                 routing: RoutingTable | None, restore: Manifest | None = None) -> None:
        self.source = source
        self.chain = chain
        self.parallelism = vertex.parallelism
        source.hands_over = may_gain_splits(vertex, routing)  # a live rescale may hand it splits
        self.halted_for: int | None = None  # a synchronous checkpoint this source waits for
        self.held: TriggerCheckpoint | None = None  # a replayed epoch's trigger, until the cut
        if restore is not None and restore.replay is not None:  # epochs replayed at their cuts
            source.replay_to(restore.replay.cuts_of(source.uid))

    @staticmethod
    def of(first: RuntimeOperator, chain: OperatorChain, vertex: JobVertex, routing: RoutingTable | None,
           restore: Manifest | None = None) -> SourceInput | None:
        """The source input of a chain whose first operator is a source; else None."""
        return SourceInput(first, chain, vertex, routing, restore) if isinstance(first, SourceOperator) else None

    def handlers(self, owner: KeyGroupOwner) -> dict[type, Callable[[Any], None]]:
        """The control messages about its splits."""
        source = self.source
        return {
            AssignSplits: lambda m: source.assign(m.splits, m.indices),
            AdoptSplits: lambda m: owner.adopt_splits(source, m.manifest),
            NoMoreSplits: lambda m: setattr(source, "no_more_splits", True),
        }

    def ready(self, now: float) -> bool:
        return self.halted_for is None and self.source.ready(now)

    def step(self, batch_size: int) -> bool:
        """Read one batch into the chain; False once the source has ended (the task ends its input)."""
        if self.halted_for is not None:
            return True
        source = self.source
        batch = source.poll(batch_size)
        if batch is None:
            if source.watermarks is not None:
                self.chain.advance_watermark(WatermarkAdvance(END_OF_TIME), 1)
            return False
        self.chain.records_out[0] += batch_len(batch)
        self.chain.process(batch, 1)
        if source.watermarks is not None and (advance := source.take_watermark()) is not None:
            self.chain.advance_watermark(advance, 1)
        return True

    # -- checkpoints -----------------------------------------------------------------------------
    def holds(self, trigger: TriggerCheckpoint, running: bool) -> bool:
        """Whether `trigger` waits until the source reached its cut (kept in `held`)."""
        if running and self.source.holds(trigger.checkpoint_id):
            self.held = trigger
            return True
        self.source.cut_passed(trigger.checkpoint_id)
        return False

    def released(self, ended: bool) -> TriggerCheckpoint | None:
        """The held trigger once the source is at its cut (or has ended): its barrier goes now."""
        if self.held is None or not (ended or self.source.at_cut()):
            return None
        held, self.held = self.held, None
        return held

    def halt(self, checkpoint_id: int) -> None:
        self.halted_for = checkpoint_id

    def aborted(self, checkpoint_id: int) -> None:
        if self.halted_for == checkpoint_id:
            self.halted_for = None

    def completed(self, checkpoint_id: int) -> None:
        if self.halted_for is not None and self.halted_for <= checkpoint_id:
            self.halted_for = None

    def before_reroute(self, table: RoutingTable, output: OutputGate) -> None:
        """Splits come to it at this barrier (`gains`): ahead of it, its watermark is set back."""
        if table.parallelism == self.parallelism and self.source.gains(table.active):
            output.broadcast(Watermark(NO_WATERMARK))

    def after_reroute(self, checkpoint_id: int, table: RoutingTable) -> None:
        """The barrier went out: give up the splits it no longer reads."""
        if table.parallelism == self.parallelism:
            advance = self.source.hand_over(checkpoint_id, table.active)
            if advance is not None:
                self.chain.advance_watermark(advance, 1)
