"""What travels on a channel: record batches and in-band control events, FIFO per channel.

Barriers (the thesis' *epoch markers*, dissertation §3.4), watermarks and
end-of-input are in-band so that FIFO order alone places them exactly between records, which is
what makes a barrier cut the stream consistently (ABS §4.2, assumption of FIFO channels).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import Enum
from typing import Any, TypeAlias

import pyarrow as pa

from ...state.keygroups import RoutingTable

# A batch is a list of Python records, or an Arrow record batch on the columnar path.
Batch: TypeAlias = list[Any] | pa.RecordBatch


class Alignment(Enum):
    """How a task treats the barrier of one checkpoint (`CheckpointConfig.mode`)."""

    ALIGNED = "aligned"  # block each input at its barrier until all delivered it (ABS Algorithm 1)
    UNALIGNED = "unaligned"  # overtake queued input, snapshot at the first, log in-flight data
    NONE = "none"  # at-least-once: count the barriers, block nothing (records may replay twice)


@dataclass(frozen=True, slots=True)
class Barrier:
    """Separates the records before checkpoint `checkpoint_id` from those after it."""

    checkpoint_id: int
    timestamp: float
    synchronous: bool = False  # write state before processing on (Naiad-style, for comparison)
    completed: int = 0  # the newest checkpoint complete when this one was triggered
    alignment: Alignment = Alignment.ALIGNED
    # key groups move at this barrier: the routing table from here on (`runtime.master.migrations`)
    reroute: RoutingTable | None = None
    # on a channel into a loop head, which takes every barrier ahead of its queue (`task.loop_cut`)
    at_loop_head: bool = False
    # the newest live logic patch in effect from this barrier on: a task switches to the patches
    # it staged up to it when it fixes its state (`runtime.patches`); 0: none
    patch: int = 0

    @property
    def overtakes(self) -> bool:
        """An unaligned barrier, or one into a loop head, jumps the queue of its input channel
        (`task.in_flight`, `task.loop_cut`)."""
        return self.alignment is Alignment.UNALIGNED or self.at_loop_head


@dataclass(frozen=True, slots=True)
class Watermark:
    """No record older than `timestamp` follows on this channel (`runtime.watermarks`).

    `idle`: the producer has nothing to say for now (its splits are idle); its channel stops
    holding back the consumer's watermark until a watermark without `idle` comes.
    """

    timestamp: float
    idle: bool = False


@dataclass(frozen=True, slots=True)
class EndOfInput:
    """The channel will carry nothing more: the producer's input is exhausted."""


END_OF_INPUT = EndOfInput()


@dataclass(frozen=True, slots=True)
class LoopProbe:
    """A probe sent round loop `loop` (its head's vertex) by its head, one round at a time.

    Each task of the loop forwards it after it arrived on all its inputs in the loop, marking it
    `active` if it processed anything since it forwarded the previous round. A round that comes
    back clean proves the loop empty: every record of the loop was processed before the probe
    passed, and none was sent after it (FIFO channels); the head's input having ended, the loop
    ends (`runtime.master.loop_termination`). `low` carries progress: the smallest event time
    an inner loop it passed may still hold (`runtime.task.loop_clock`).
    """

    round: int
    active: bool
    loop: int = 0
    low: float = math.inf


Element: TypeAlias = list[Any] | pa.RecordBatch | Barrier | Watermark | EndOfInput | LoopProbe


def is_batch(element: Element) -> bool:
    return type(element) is list or isinstance(element, pa.RecordBatch)
