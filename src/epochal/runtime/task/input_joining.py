"""Joining small record lists across a task's inputs, so per-batch costs do not grow with p.

A keyed edge cuts each upstream batch into one piece per consumer: at parallelism p a consumer
receives pieces of about batch_size / p records, one input per upstream subtask. The input gate
joins lists queued back to back on *one* channel (`InputGate._join_records`), but the pieces of
one moment sit on p different channels. An operator with a fixed cost per batch (the columnar
keyed aggregates convert a list to Arrow, hash and probe per batch: about 0.6 ms) then pays it
p times as often for the same records; issue 42 measured 16,228 batches at parallelism 128
against 304 at 8 for the same 320,000 words, and most of the run's CPU went there.

So a task's step takes the lists heading its other readable inputs into the list it polled, up
to a batch. Nothing about order or checkpoints changes: each channel is still read FIFO, only
its head is taken, only while it is a list (never a barrier, watermark, end of input or probe,
so nothing crosses an in-band event of its channel), and only from inputs alignment does not
block (the gate's `readable`). Order across inputs was arbitrary before and stays so. Not done
where an input's identity matters beyond the batch: a two-input operator's sides are not mixed,
and tasks that log what each input delivered (unaligned checkpoints, a loop head's cut) join
nothing.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from .input_gate import InputGate


def join_across_inputs(gate: InputGate, idx: int, batch: list[Any], second_inputs: Collection[int]) -> list[Any]:
    """`batch` (polled from input `idx`) with the lists heading the gate's other readable
    inputs of the same side appended, up to the gate's batch size."""
    limit = gate.batch_size
    side = idx in second_inputs
    merged: list[Any] | None = None
    size = len(batch)
    while size < limit:
        nxt = gate.readable()
        if nxt is None or (nxt in second_inputs) != side:
            break
        head = gate.channels[nxt].peek()
        if type(head) is not list or size + len(head) > limit:
            break
        polled = gate.poll()
        assert polled is not None and polled[0] == nxt
        if merged is None:
            merged = list(batch)  # never extend a list another channel or operator may share
        merged.extend(polled[1])
        size = len(merged)
    return batch if merged is None else merged
