"""ProcessContext and RuntimeContext: what user functions see of the runtime.

A protocol, not a class the runtime inherits: the runtime must not import the API layer
(imports point one way), so its context object conforms structurally and mypy checks user code
against this contract. The state handles it returns are those of `epochal.state.handles`.

Timers run in two domains: event time (they fire when the watermark reaches them) and
processing time (when the task's clock does); `time_domain` says which one fired in `on_timer`.
"""

from __future__ import annotations

from typing import Any, Literal, Protocol, TypeVar, overload, runtime_checkable

from ..state.handles import ListState, MapState, ValueState
from ..state.operator_state import OperatorListState
from ..state.ttl import StateTtlConfig

V = TypeVar("V")  # a value state's values

Redistribution = Literal["split", "broadcast"]


@runtime_checkable
class RuntimeContext(Protocol):
    """What a rich function's `open(ctx)` sees: where it runs, and its operator state.

    Operator state is a list per name that belongs to the subtask, not to a key; it is
    checkpointed with the operator and, on a restore at another parallelism, `split` (the old
    lists concatenated and cut into one contiguous part per new subtask; at the same parallelism
    each subtask gets its own back) or `broadcast` (every subtask gets every item), as Flink's
    `CheckpointedFunction` list and union list state.
    """

    @property
    def operator_name(self) -> str:
        """The operator's name, unique in the job."""
        ...

    @property
    def subtask(self) -> int:
        """The index of this subtask, in `[0, parallelism)`."""
        ...

    @property
    def parallelism(self) -> int:
        """How many subtasks the operator runs."""
        ...

    @property
    def max_parallelism(self) -> int:
        """The job's key groups: the most subtasks a keyed operator can run."""
        ...

    def current_processing_time(self) -> float:
        """Seconds since the epoch by the task's clock."""
        ...

    def operator_list_state(self, name: str, mode: Redistribution = "split") -> OperatorListState[Any]:
        """Register (or fetch) the operator list `name`; restored items are in it already.

        Raises:
            ValueError: `name` starts with `__` (reserved), `mode` is not "split" or
                "broadcast", or `name` is registered with another mode.
        """
        ...


@runtime_checkable
class Timers(Protocol):
    """The current key's timers (`ctx.timers`); one per key, domain and timestamp."""

    def register_event_time(self, timestamp: float) -> None:
        """Call `on_timer(timestamp, ctx)` for the current key once the watermark reaches it
        (seconds since the epoch, or a `datetime`)."""
        ...

    def delete_event_time(self, timestamp: float) -> None:
        """Drop the current key's event-time timer at `timestamp`, if there is one."""
        ...

    def register_processing_time(self, timestamp: float) -> None:
        """Call `on_timer(timestamp, ctx)` for the current key once processing time reaches it."""
        ...

    def delete_processing_time(self, timestamp: float) -> None:
        """Drop the current key's processing-time timer at `timestamp`, if there is one."""
        ...


@runtime_checkable
class ProcessContext(Protocol):
    """The current key, its keyed state, event and processing time, and timers.

    Passed to `KeyedProcessFunction.open` (register state there: only registered state is
    checkpointed) and to every `process_element` and `on_timer` call. State handles always act
    on the current key, so a handle kept from `open` serves every record.
    """

    @property
    def key(self) -> Any:
        """The key of the record (or timer) being processed; meaningless in `open`."""
        ...

    @property
    def subtask(self) -> int:
        """The index of this subtask, in `[0, parallelism)`."""
        ...

    @property
    def parallelism(self) -> int:
        """How many subtasks the operator runs."""
        ...

    def operator_list_state(self, name: str, mode: Redistribution = "split") -> OperatorListState[Any]:
        """Register (or fetch) the operator list `name`: the subtask's, not a key's; `split` or
        `broadcast` on a restore at another parallelism (see `RuntimeContext`)."""
        ...

    @overload
    def value_state(self, name: str, default: None = None, *, ttl: StateTtlConfig | None = None
                    ) -> ValueState[Any]: ...
    @overload
    def value_state(self, name: str, default: V, *, ttl: StateTtlConfig | None = None) -> ValueState[V]: ...

    def value_state(self, name: str, default: Any = None, *, ttl: StateTtlConfig | None = None) -> ValueState[Any]:
        """Register (or fetch) the keyed value state `name`; `value()` gives `default` for a new key
        (typed: `value_state("n", default=0)` is a `ValueState[int]`).

        With `ttl` (a `StateTtlConfig`) the value expires that long after it was written (or
        read), and expired values leave the state by themselves (`epochal.StateTtlConfig`).

        Raises:
            ValueError: `name` starts with `__` (reserved), or is registered as another kind.
        """
        ...

    def list_state(self, name: str, *, ttl: StateTtlConfig | None = None) -> ListState[Any]:
        """Register (or fetch) the keyed list state `name`; with `ttl` each element expires.

        Raises:
            ValueError: `name` starts with `__` (reserved), or is registered as another kind.
        """
        ...

    def map_state(self, name: str, *, ttl: StateTtlConfig | None = None) -> MapState[Any, Any]:
        """Register (or fetch) the keyed map state `name`; with `ttl` each entry expires.

        Raises:
            ValueError: `name` starts with `__` (reserved), or is registered as another kind.
        """
        ...

    @property
    def timers(self) -> Timers:
        """The current key's timers, in both time domains."""
        ...

    @property
    def time_domain(self) -> Any:
        """In `on_timer`: the domain of the timer firing (a `TimeDomain`, whose `.value` is
        `"event_time"` or `"processing_time"`); None elsewhere."""
        ...

    def current_watermark(self) -> float:
        """The operator's event time: no record older than this is still to come (-inf before
        the first watermark, inf once the input ended)."""
        ...

    def current_processing_time(self) -> float:
        """Seconds since the epoch by the task's clock (a virtual clock's own seconds in replayed runs)."""
        ...

    def output(self, tag: Any, record: Any) -> None:
        """Send `record` to the side output `tag` (an `OutputTag`), which the program reads with
        `stream.side_output(tag)`; records of a tag nobody reads are dropped."""
        ...

    def register_processing_time_timer(self, timestamp: float) -> None:
        """Call `on_timer(timestamp, ctx)` for the current key once processing time reaches it.

        Timers are keyed state: checkpointed with their key, and one per key and timestamp
        (registering it again changes nothing).
        """
        ...

    def delete_processing_time_timer(self, timestamp: float) -> None:
        """Drop the current key's timer at `timestamp`, if there is one."""
        ...


@runtime_checkable
class CoProcessContext(Protocol):
    """What a `CoProcessFunction` (streams not keyed) sees: no keyed state, no timers."""

    @property
    def subtask(self) -> int:
        """The index of this subtask, in `[0, parallelism)`."""
        ...

    def current_watermark(self) -> float:
        """The operator's event time: the minimum of both inputs' watermarks."""
        ...

    def current_processing_time(self) -> float:
        """Seconds since the epoch by the task's clock."""
        ...

    def output(self, tag: Any, record: Any) -> None:
        """Send `record` to the side output `tag` (an `OutputTag`)."""
        ...


@runtime_checkable
class ReadOnlyBroadcastState(Protocol):
    """A broadcast map as the data side of a broadcast function sees it: read only."""

    def get(self, key: Any, default: Any = None) -> Any:
        """The value under `key` (never change it in place)."""
        ...

    def contains(self, key: Any) -> bool: ...
    def keys(self) -> list[Any]: ...
    def values(self) -> list[Any]: ...
    def items(self) -> list[tuple[Any, Any]]: ...


@runtime_checkable
class BroadcastState(ReadOnlyBroadcastState, Protocol):
    """A broadcast map as the broadcast side sees it: read and write."""

    def put(self, key: Any, value: Any) -> None: ...
    def remove(self, key: Any) -> None: ...
    def clear(self) -> None: ...


@runtime_checkable
class BroadcastSideContext(CoProcessContext, Protocol):
    """What `process_broadcast_element` sees: the broadcast state, read and write."""

    def broadcast_state(self, descriptor: Any) -> BroadcastState:
        """The broadcast map a `MapStateDescriptor` names (declared in `stream.broadcast(...)`)."""
        ...

    def apply_to_keyed_state(self, state: str, fn: Any) -> None:
        """Keyed broadcast functions only: call `fn(key, handle)` for every key of this subtask
        holding keyed state `state` (registered in `open`); `handle` acts on that key's entry."""
        ...


@runtime_checkable
class JoinContext(Protocol):
    """What a `ProcessJoinFunction` sees for one pair."""

    @property
    def key(self) -> Any:
        """The join key of the pair."""
        ...

    @property
    def left_timestamp(self) -> float:
        """The left record's event time (NaN in a lookup join without event time)."""
        ...

    @property
    def right_timestamp(self) -> float | None:
        """The right record's event time; None for a left record an outer join found no match for."""
        ...

    @property
    def window(self) -> tuple[float, float] | None:
        """`(start, end)` of the window in a window join; None in the other joins."""
        ...

    def current_watermark(self) -> float: ...

    def output(self, tag: Any, record: Any) -> None:
        """Send `record` to the side output `tag` (an `OutputTag`)."""
        ...
