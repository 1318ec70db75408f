"""User function interfaces for keyed operators."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar

import numpy as np

from .context import ProcessContext
from .rich import RichFunction

if TYPE_CHECKING:
    from ..runtime.operators.timers import PendingTimer

IN = TypeVar("IN")
K = TypeVar("K")
ACC = TypeVar("ACC")
OUT = TypeVar("OUT")


class KeyedProcessFunction(ABC, Generic[K, IN, OUT]):
    """Per-key logic with keyed state and processing-time timers.

    Every hook gets the same `ProcessContext` (`epochal.ProcessContext`). `open(ctx)` runs once
    per subtask before any record (and again after a restart): register state there with
    `ctx.value_state(name)`, `ctx.list_state(name)`, `ctx.map_state(name)`.
    `process_element(value, ctx)` runs per record with `ctx.key` set; it returns (or yields) the
    records to emit. `on_timer(timestamp, ctx)` runs when a timer is due, with `ctx.key` set to the
    timer's key and `ctx.time_domain` to its domain: an event-time timer
    (`ctx.timers.register_event_time(ts)`) once the watermark reaches `ts`, a processing-time timer
    (`ctx.timers.register_processing_time(ts)`) once the clock does.

    Each subtask gets its own copy of the function object, so instance attributes are per
    subtask; only state registered through `ctx` is checkpointed: keyed state, and operator
    state (`ctx.operator_list_state(name)`: the subtask's, split or broadcast on rescale).
    `snapshot_state(checkpoint_id)` runs at each checkpoint (copy fields into operator state
    there); `close()` when the subtask ends or fails. When the input ends, event-time timers fire
    with the last watermark, and `on_end_of_input(pending, ctx)` runs once per subtask with the
    processing-time timers still pending (`process(..., timers_at_end="fire")` fires them first).

    Example:
        >>> class Dedup(KeyedProcessFunction):
        ...     def open(self, ctx):
        ...         self.seen = ctx.value_state("seen", default=False)
        ...     def process_element(self, value, ctx):
        ...         if not self.seen.value():
        ...             self.seen.update(True)
        ...             yield value
    """

    def open(self, ctx: ProcessContext) -> None:  # noqa: B027 - optional hook
        """Register state; called before the first record of each subtask."""

    @abstractmethod
    def process_element(self, value: IN, ctx: ProcessContext) -> Iterable[OUT] | None:
        """Handle one record of the current key; return or yield the records to emit."""

    def on_timer(self, timestamp: float, ctx: ProcessContext) -> Iterable[OUT] | None:
        """Handle a due timer of `ctx.key` (`ctx.time_domain` says which clock); return or yield records."""
        return None

    def on_end_of_input(self, pending: Sequence[PendingTimer], ctx: ProcessContext) -> Iterable[OUT] | None:
        """The subtask's input ended: `pending` lists the processing-time timers that did not
        fire (`key`, `timestamp`, `domain`), in time order; return or yield records to emit.
        `ctx.key` is None here. Event-time timers registered here fire at once."""
        return None

    def snapshot_state(self, checkpoint_id: int) -> None:  # noqa: B027 - optional hook
        """A checkpoint is being taken: copy fields into operator state (`ctx.operator_list_state`)."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release what `open` set up; called once per subtask, also after a failure."""


class AggregateFunction(ABC, Generic[IN, ACC, OUT]):
    """An incremental aggregation: accumulator per key, folded one value at a time.

    Example:
        >>> class Average(AggregateFunction):
        ...     def create_accumulator(self):
        ...         return (0, 0)
        ...     def add(self, value, acc):
        ...         return (acc[0] + value, acc[1] + 1)
        ...     def get_result(self, acc):
        ...         return acc[0] / acc[1]
    """

    @abstractmethod
    def create_accumulator(self) -> ACC:
        """A new, empty accumulator."""

    @abstractmethod
    def add(self, value: IN, accumulator: ACC) -> ACC:
        """Fold one value in; return the new accumulator (do not change the old one in place)."""

    @abstractmethod
    def get_result(self, accumulator: ACC) -> OUT:
        """The result of an accumulator."""

    # An aggregate function may also define `merge(a, b) -> ACC`, the accumulator of a and b
    # combined (changing neither): then `KeyedStream.aggregate` can aggregate locally before the
    # key exchange (`combine`), and windows can combine the accumulators of their slices.


class BatchAggregateFunction(ABC):
    """A vectorized aggregation on Arrow batches: per key, named numeric accumulators, computed a
    whole batch at a time with numpy (or pyarrow), never a Python call per record.

    `accumulators` maps each accumulator's name to the numpy ufunc that merges two of its
    partials element-wise (`np.add`, `np.minimum`, `np.maximum`, `np.logical_or`, ...).
    `add_batch(batch, codes, groups)` returns the partial accumulators of `groups` groups of rows
    (row `i` of `batch` is in group `codes[i]`), one array of length `groups` each;
    `result(accumulators)` turns accumulators (one row per key) into the results (an array).
    `KeyedStream.aggregate` keeps accumulators in a columnar table per key group (checkpointed,
    rescaled and queryable like any keyed state) and merges batches and local partials with the
    ufuncs; records that are not Arrow batches are converted to one first.

    Example:
        >>> import numpy as np
        >>> class RootMeanSquare(BatchAggregateFunction):
        ...     accumulators = {"squares": np.add, "n": np.add}
        ...     def add_batch(self, batch, codes, groups):
        ...         x = batch.column("x").to_numpy().astype(float)
        ...         return {"squares": np.bincount(codes, weights=x * x, minlength=groups),
        ...                 "n": np.bincount(codes, minlength=groups)}
        ...     def result(self, acc):
        ...         return np.sqrt(acc["squares"] / acc["n"])
    """

    accumulators: ClassVar[Mapping[str, np.ufunc]]

    @abstractmethod
    def add_batch(self, batch: Any, codes: np.ndarray, groups: int) -> Mapping[str, np.ndarray]:
        """The accumulators of each of `groups` groups of the batch's rows (`codes[i]`: row i's group)."""

    @abstractmethod
    def result(self, accumulators: Mapping[str, np.ndarray]) -> Any:
        """The results of accumulators (one element per key): a numpy array or an Arrow array."""


class _AggregateProcess(KeyedProcessFunction[Any, Any, Any]):
    """`KeyedStream.aggregate` as a keyed process function: emits `(key, result)` per record."""

    def __init__(self, aggregate: AggregateFunction[Any, Any, Any]) -> None:
        self.aggregate = aggregate

    def open(self, ctx: ProcessContext) -> None:
        self.acc = ctx.value_state("accumulator")

    def process_element(self, value: Any, ctx: ProcessContext) -> Iterable[Any]:
        acc = self.acc.value()
        if acc is None:
            acc = self.aggregate.create_accumulator()
        acc = self.aggregate.add(value, acc)
        self.acc.update(acc)
        return ((ctx.key, self.aggregate.get_result(acc)),)


# `epochal/__init__.py` re-homes these classes to `epochal`; list them so doctest still finds them.
__test__ = {"KeyedProcessFunction": KeyedProcessFunction, "AggregateFunction": AggregateFunction,
            "BatchAggregateFunction": BatchAggregateFunction}


class ProcessWindowFunction(RichFunction, ABC, Generic[K, IN, OUT]):
    """Per-window logic over all of a window's records (they are kept, not pre-aggregated).

    A rich function: `open(ctx)` once per subtask, `close()` at the end (`epochal.RichFunction`).

    `process(key, window, records)` runs once per window result: `window` has `query`, `start`
    and `end`; `records` are the window's records in event-time order. It returns (or yields) the
    records to emit. A late record within the allowed lateness calls it again with every record.
    A `process` that takes a fourth argument, `ctx`, gets a context with `ctx.output(tag, record)`
    (side outputs, read with `results.side_output(tag)`) and `ctx.current_watermark()`.

    Example:
        >>> class Spread(ProcessWindowFunction):
        ...     def process(self, key, window, records):
        ...         prices = [r["price"] for r in records]
        ...         yield (key, window.start, max(prices) - min(prices))
    """

    @abstractmethod
    def process(self, key: K, window: Any, records: list[IN]) -> Iterable[OUT] | None:
        """Emit what one window of `key` produces."""
