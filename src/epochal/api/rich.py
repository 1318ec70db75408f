"""Rich functions: user functions with a lifecycle and operator state of their own.

A plain function is all `map`, `filter`, `flat_map`, `reduce` and `map_batches` need. When a
function must open a client once per subtask, close it, or keep checkpointed state that belongs
to the subtask rather than to a key, subclass one of these (Flink's `RichMapFunction` and
`CheckpointedFunction` in one): `open(ctx)` runs once per subtask, after the state was restored
and before the first record; `snapshot_state(checkpoint_id)` at every checkpoint;
`close()` at the end, and after a failure. Each subtask gets its own copy of the object.

Example:
    >>> from epochal import StreamEnvironment
    >>> from epochal.testing import ListSource, CollectSink
    >>> class Numbered(MapFunction):
    ...     def open(self, ctx):
    ...         self.seen = ctx.operator_list_state("seen")  # checkpointed, split on rescale
    ...         self.prefix = f"{ctx.subtask}/{ctx.parallelism}"
    ...     def map(self, value):
    ...         self.seen.add(value)
    ...         return (self.prefix, len(self.seen), value)
    >>> env = StreamEnvironment(parallelism=1, executor="inprocess")
    >>> sink = CollectSink()
    >>> _ = env.from_source(ListSource(["a", "b"])).map(Numbered()).sink_to(sink)
    >>> _ = env.execute("numbered")
    >>> sorted(sink.committed())
    [('0/1', 1, 'a'), ('0/1', 2, 'b')]
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Iterable
from typing import Any, Generic, TypeVar

from ..plan.functions import RichFunction as _PlanRichFunction
from .context import RuntimeContext

IN = TypeVar("IN")
OUT = TypeVar("OUT")
T = TypeVar("T")


class RichFunction(_PlanRichFunction):
    """A user function with a lifecycle: `open(ctx)`, `snapshot_state(checkpoint_id)`, `close()`."""

    def open(self, ctx: RuntimeContext) -> Any:
        """Set up once per subtask: `ctx` says which (`subtask`, `parallelism`) and holds the
        operator state (`ctx.operator_list_state(name, mode="split" | "broadcast")`)."""
        return None

    def snapshot_state(self, checkpoint_id: int) -> None:
        """A checkpoint is being taken: copy what must survive a failure into operator state."""

    def close(self) -> Any:
        """Release what `open` set up; called once per subtask, also after a failure."""
        return None


class MapFunction(RichFunction, Generic[IN, OUT]):
    """`map` with a lifecycle: `map(value)` returns the record to emit."""

    @abstractmethod
    def map(self, value: IN) -> OUT:
        """The record to emit for `value`."""

    def __call__(self, value: IN) -> OUT:
        return self.map(value)


class FilterFunction(RichFunction, Generic[T]):
    """`filter` with a lifecycle: `filter(value)` is true for the records to keep."""

    @abstractmethod
    def filter(self, value: T) -> bool:
        """Whether to keep `value`."""

    def __call__(self, value: T) -> bool:
        return self.filter(value)


class FlatMapFunction(RichFunction, Generic[IN, OUT]):
    """`flat_map` with a lifecycle: `flat_map(value)` returns (or yields) the records to emit."""

    @abstractmethod
    def flat_map(self, value: IN) -> Iterable[OUT]:
        """The records to emit for `value`."""

    def __call__(self, value: IN) -> Iterable[OUT]:
        return self.flat_map(value)


class ReduceFunction(RichFunction, Generic[T]):
    """`reduce` with a lifecycle: `reduce(previous, value)` returns the new value."""

    @abstractmethod
    def reduce(self, previous: T, value: T) -> T:
        """`previous` and `value` combined (a new value: do not change `previous` in place)."""

    def __call__(self, previous: T, value: T) -> T:
        return self.reduce(previous, value)


# `epochal/__init__.py` re-homes these classes to `epochal`; list them so doctest still finds them.
__test__ = {"RichFunction": RichFunction}
