"""A task's input step: elements from its input gate (or restored in flight) into its chain.

Where a source task's step asks its `SourceInput` for a batch, a task with inputs takes the
next element its `InputGate` gives and hands it on: a batch to the chain (to a two-input
operator's second side if it came on a second input; joined with what its other inputs hold
when it is short, `input_joining`), a barrier to the aligner (ABS §4.2, Algorithm 1) and, once
aligned, to the task's checkpoint, a watermark to the inputs' minimum (`InputWatermarks`), a
loop probe to the task's loop (ABS §4.3), an end of input to the aligner, the watermarks and
the in-flight logs. What it owns: the inputs' watermarks, which inputs are second ones,
whether unaligned barriers overtake its input, and the in-flight data a restore hands it first.
The task keeps its lifecycle (`TaskState`) and its checkpoints: an input that ends, or
drains a loop, tells the task (`InputHost`).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from typing import Any, Protocol

from ..watermarks import InputWatermarks, WatermarkAdvance
from ..wire.elements import Barrier, Element, EndOfInput, LoopProbe, Watermark, is_batch
from .aligner import AlignStep
from .chain import OperatorChain
from .in_flight import UnalignedBarriers
from .input_gate import InputGate
from .input_joining import join_across_inputs
from .loop_cut import LoopCut
from .loop_probes import TaskLoop
from .output_gate import OutputGate
from .setup import TaskState
from .task_checkpoints import TaskCheckpoints

_CONTROL = (Barrier, Watermark, EndOfInput)  # in-band events a step takes in a row (`GateInput.step`)


class InputHost(Protocol):
    """What the input step needs of its task: its lifecycle, its control messages, its checkpoint."""

    @property
    def state(self) -> TaskState: ...

    @property
    def inbox(self) -> deque[Any]: ...

    def checkpoint(self, barrier: Barrier) -> None:
        """Fix state, forward the barrier, and write the snapshot in the background."""
        ...

    def end_input(self) -> None:
        """Every input ended: end the chain's input and tell downstream."""
        ...

    def drain(self) -> None:
        """A loop head's regular inputs ended: run on until the loop is empty."""
        ...


class GateInput:
    """The step of a task with inputs: one element (and the control events behind it) into the chain.

    Args:
        task: the task, told when a barrier aligns and when its inputs end (`InputHost`).
        overtakes: unaligned barriers are taken ahead of the input (`in_flight`); only for a task
            outside loops.
        second_inputs: the channels of a two-input operator's second input.
        back_edges: the channels that close a loop; they never hold the watermark back.
        is_head: the task is a loop head: it drains its loop once its regular inputs ended.
    """

    def __init__(
        self, task: InputHost, name: str, gate: InputGate, chain: OperatorChain, output: OutputGate,
        loop: TaskLoop, cut: LoopCut | None, unaligned: UnalignedBarriers, checkpoints: TaskCheckpoints,
        overtakes: bool, second_inputs: frozenset[int], back_edges: frozenset[int], is_head: bool,
    ) -> None:
        self.task = task
        self.name = name
        self.gate = gate
        self.chain = chain
        self.output = output
        self.loop = loop
        self.cut = cut
        self.unaligned = unaligned
        self.checkpoints = checkpoints
        self.overtakes = overtakes
        self.second_inputs = second_inputs
        self.is_head = is_head
        self.watermarks = InputWatermarks(len(gate), back_edges)
        self._restored: deque[tuple[int, Element]] = deque()  # restored in-flight data, first of all

    # -- restored in-flight data -----------------------------------------------------------------
    def restore(self, elements: Iterable[tuple[int, Element]]) -> None:
        """In-flight data a checkpoint logged (`in_flight`): handed on ahead of any new input."""
        self._restored.extend(elements)

    @property
    def replaying(self) -> bool:
        return bool(self._restored)

    def replay(self) -> None:
        while self._restored:
            self.on_element(*self._restored.popleft())

    # -- the step --------------------------------------------------------------------------------
    def step(self) -> None:
        """Take the next element; then, in the same step, the barriers, watermarks and ends of
        input that head the other inputs: a keyed edge gives a task an input per upstream
        subtask, each delivering every barrier, and one step each cost a step's overhead 128
        times per checkpoint at parallelism 128."""
        gate, task = self.gate, self.task
        polled = gate.poll()
        taken = 0
        while polled is not None:
            idx, element = polled
            if self.overtakes:
                self.unaligned.log(idx, element)
            elif self.cut:
                self.cut.log(idx, element)
            elif type(element) is list and len(element) < gate.batch_size:
                element = join_across_inputs(gate, idx, element, self.second_inputs)
            self.on_element(idx, element)
            taken += 1
            if taken >= len(gate) or self.cut is not None or task.state is not TaskState.RUNNING or task.inbox \
                    or not self.output.has_capacity() or type(gate.peek()) not in _CONTROL:
                return
            polled = gate.poll()

    def on_element(self, idx: int, element: Element) -> None:
        if is_batch(element):
            self.loop.on_batch(element)
            (self.chain.process_second if idx in self.second_inputs else self.chain.process)(element)
        elif type(element) is Barrier:
            if self.cut is not None:
                self.cut.on_barrier(idx, [], element)
                return
            step = self.gate.on_barrier(idx, element)
            self.checkpoints.decline_abandoned()
            if step is AlignStep.SNAPSHOT:
                self.task.checkpoint(element)
        elif type(element) is EndOfInput:
            self._on_end_of_input(idx)
        elif type(element) is LoopProbe:
            emitted = self.loop.on_probe(idx, element, self.gate.aligner.ended,
                                         self.task.state is TaskState.DRAINING)
            if emitted is not None:
                self.chain.advance_watermark(emitted, 0)
        elif type(element) is Watermark:
            advance = self.watermarks.on_watermark(idx, element.timestamp, element.idle)
            if advance is not None:
                self._advance_watermark(advance)
        else:
            raise RuntimeError(f"task {self.name}: unexpected element {element!r}")

    def _on_end_of_input(self, idx: int) -> None:
        advance = self.watermarks.on_end(idx)
        if advance is not None and self.watermarks.has_seen:
            self._advance_watermark(advance)
        aligner = self.gate.aligner
        if aligner.on_end_of_input(idx) is AlignStep.SNAPSHOT:
            assert aligner.completed is not None
            self.task.checkpoint(aligner.completed)
        if self.cut is not None:
            self.cut.channel_ended(idx)
        self.unaligned.channel_ended(idx)
        if aligner.all_ended:
            if self.task.state is not TaskState.ENDED:
                self.task.end_input()
        elif self.is_head and aligner.regular_ended and self.task.state is TaskState.RUNNING:
            # The loop's input ended; the loop itself may still hold records.
            self.task.drain()

    def _advance_watermark(self, advance: WatermarkAdvance) -> None:
        """The inputs' watermark moved: on through the chain, unless an event-time loop head
        holds it until a round proves the loop past it (`loop_clock`)."""
        if self.loop.clock is not None:
            self.loop.clock.on_input(advance)
        else:
            self.chain.advance_watermark(advance, 0)
