"""User function interfaces for operators with two inputs, and the names they use.

- `CoProcessFunction` and `KeyedCoProcessFunction`: one hook per input of connected streams
  (`a.connect(b).process(...)`); the keyed one shares keyed state and timers between both inputs.
- `BroadcastProcessFunction` and `KeyedBroadcastProcessFunction`: a stream and a broadcast
  stream of rules or configuration (`stream.connect(rules.broadcast(descriptor))`).
- `ProcessJoinFunction`: what a join emits for a pair, with its timestamps and side outputs.
- `OutputTag`: names a side output (`ctx.output(tag, record)`, `stream.side_output(tag)`).
- `MapStateDescriptor`: names a broadcast state (a map).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from ..validation import check_name
from .context import BroadcastSideContext, CoProcessContext, JoinContext, ProcessContext

K = TypeVar("K")  # the key
IN1 = TypeVar("IN1")  # the first (left, data) input's records
IN2 = TypeVar("IN2")  # the second (right, broadcast) input's records
OUT = TypeVar("OUT")  # what the function emits


@dataclass(frozen=True, slots=True)
class OutputTag:
    """The name of a side output: a function sends records to it with `ctx.output(tag, record)`,
    and the program reads them with `stream.side_output(tag)`, a stream of its own.

    Example:
        >>> errors = OutputTag("errors")
        >>> errors.name
        'errors'
    """

    name: str

    def __post_init__(self) -> None:
        check_name("name", self.name)
        if self.name.startswith("__"):
            raise ValueError(f"side output names starting with '__' are reserved: {self.name!r}")


@dataclass(frozen=True, slots=True)
class MapStateDescriptor:
    """The name of a broadcast state: a map every subtask of the operator holds the same copy of.

    Example:
        >>> rules = MapStateDescriptor("rules")
        >>> rules.name
        'rules'
    """

    name: str

    def __post_init__(self) -> None:
        check_name("name", self.name)


class CoProcessFunction(ABC, Generic[IN1, IN2, OUT]):
    """Logic over two streams that are not keyed: a hook per input, no keyed state, no timers.

    `process_element1(value, ctx)` runs per record of the first stream, `process_element2` per
    record of the second; each returns (or yields) the records to emit. `ctx` is a
    `CoProcessContext` (subtask, watermark, side outputs). Records of the two inputs interleave
    in no set order.
    """

    def open(self, ctx: CoProcessContext) -> None:  # noqa: B027 - optional hook
        """Called once per subtask before any record."""

    @abstractmethod
    def process_element1(self, value: IN1, ctx: CoProcessContext) -> Iterable[OUT] | None:
        """Handle a record of the first input."""

    @abstractmethod
    def process_element2(self, value: IN2, ctx: CoProcessContext) -> Iterable[OUT] | None:
        """Handle a record of the second input."""


class KeyedCoProcessFunction(ABC, Generic[K, IN1, IN2, OUT]):
    """Logic over two keyed streams, sharing keyed state and timers per key.

    Both inputs are keyed (`a.key_by(f).connect(b.key_by(g))`, or `connect(...).key_by(f, g)`),
    so the records of both with the same key meet in one state: register it in `open(ctx)` as in
    a `KeyedProcessFunction`. `process_element1` / `process_element2` run per record of the first
    / second input with `ctx.key` set; `on_timer` when a timer of the key is due. The state of a
    key holds both sides and lives in the key's group: it is checkpointed, restored, rescaled and
    moved live with it.

    Example (a join of orders with the latest price of their item):
        >>> class PriceOrders(KeyedCoProcessFunction):
        ...     def open(self, ctx):
        ...         self.price = ctx.value_state("price")
        ...     def process_element1(self, order, ctx):
        ...         price = self.price.value()
        ...         if price is not None:
        ...             yield (order["id"], order["qty"] * price)
        ...     def process_element2(self, price, ctx):
        ...         self.price.update(price["price"])
    """

    def open(self, ctx: ProcessContext) -> None:  # noqa: B027 - optional hook
        """Register state; called before the first record of each subtask."""

    @abstractmethod
    def process_element1(self, value: IN1, ctx: ProcessContext) -> Iterable[OUT] | None:
        """Handle a record of the first input, of key `ctx.key`."""

    @abstractmethod
    def process_element2(self, value: IN2, ctx: ProcessContext) -> Iterable[OUT] | None:
        """Handle a record of the second input, of key `ctx.key`."""

    def on_timer(self, timestamp: float, ctx: ProcessContext) -> Iterable[OUT] | None:
        """Handle a due timer of `ctx.key`."""
        return None


class BroadcastProcessFunction(ABC, Generic[IN1, IN2, OUT]):
    """A stream that is not keyed, with a broadcast stream of rules or configuration.

    `process_broadcast_element(value, ctx)` runs in every subtask for every broadcast record and
    may change the broadcast state (`ctx.broadcast_state(descriptor)`: read and write);
    `process_element(value, ctx)` runs per record of the other stream and may only read it. Every
    subtask must change the state the same way for the same records (no randomness, no clock):
    the state is checkpointed once, not per subtask.
    """

    def open(self, ctx: CoProcessContext) -> None:  # noqa: B027 - optional hook
        """Called once per subtask before any record."""

    @abstractmethod
    def process_element(self, value: IN1, ctx: Any) -> Iterable[OUT] | None:
        """Handle a record of the stream; `ctx.broadcast_state(d)` is read only."""

    @abstractmethod
    def process_broadcast_element(self, value: IN2, ctx: BroadcastSideContext) -> Iterable[OUT] | None:
        """Handle a broadcast record; `ctx.broadcast_state(d)` is read and write."""


class KeyedBroadcastProcessFunction(ABC, Generic[K, IN1, IN2, OUT]):
    """A keyed stream, with keyed state and timers, and a broadcast stream.

    As `BroadcastProcessFunction`, with `process_element` and `on_timer` running as in a
    `KeyedProcessFunction` (`ctx.key`, keyed state registered in `open`, timers), plus read-only
    `ctx.broadcast_state(d)`. `process_broadcast_element` has no current key; it may visit every
    key of its subtask with `ctx.apply_to_keyed_state(name, fn)`.

    Example (records above a threshold that a rules stream sets):
        >>> THRESHOLDS = MapStateDescriptor("thresholds")
        >>> class Alert(KeyedBroadcastProcessFunction):
        ...     def process_element(self, reading, ctx):
        ...         limit = ctx.broadcast_state(THRESHOLDS).get("limit")
        ...         if limit is not None and reading["value"] > limit:
        ...             yield (ctx.key, reading["value"])
        ...     def process_broadcast_element(self, rule, ctx):
        ...         ctx.broadcast_state(THRESHOLDS).put("limit", rule["limit"])
    """

    def open(self, ctx: ProcessContext) -> None:  # noqa: B027 - optional hook
        """Register keyed state; called before the first record of each subtask."""

    @abstractmethod
    def process_element(self, value: IN1, ctx: Any) -> Iterable[OUT] | None:
        """Handle a record of the keyed stream, of key `ctx.key`."""

    @abstractmethod
    def process_broadcast_element(self, value: IN2, ctx: BroadcastSideContext) -> Iterable[OUT] | None:
        """Handle a broadcast record (no current key)."""

    def on_timer(self, timestamp: float, ctx: Any) -> Iterable[OUT] | None:
        """Handle a due timer of `ctx.key`."""
        return None


class ProcessJoinFunction(ABC, Generic[IN1, IN2, OUT]):
    """What a join emits for one pair of records: `process_element(left, right, ctx)` returns
    (or yields) records; `ctx` (`JoinContext`) gives the key, both timestamps, the window of a
    window join, and side outputs. In a left outer join, `right` is None for a left record that
    found no match.

    Example:
        >>> class Delay(ProcessJoinFunction):
        ...     def process_element(self, left, right, ctx):
        ...         yield (ctx.key, ctx.right_timestamp - ctx.left_timestamp)
    """

    def open(self, ctx: JoinContext) -> None:  # noqa: B027 - optional hook
        """Called once per subtask before any record."""

    @abstractmethod
    def process_element(self, left: IN1, right: IN2, ctx: JoinContext) -> Iterable[OUT] | None:
        """Emit what one pair produces."""


# `epochal/__init__.py` re-homes these classes to `epochal`; list them so doctest still finds them.
__test__ = {
    "OutputTag": OutputTag, "MapStateDescriptor": MapStateDescriptor, "KeyedCoProcessFunction": KeyedCoProcessFunction,
    "KeyedBroadcastProcessFunction": KeyedBroadcastProcessFunction, "ProcessJoinFunction": ProcessJoinFunction,
}
