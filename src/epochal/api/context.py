"""ProcessContext: what a keyed process function sees of the runtime.

A protocol, not a class the runtime inherits: the runtime must not import the API layer
(imports point one way), so its context object conforms structurally and mypy checks user code
against this contract. The state handles it returns are those of `epochal.state.handles`.

The contract will grow with event time (the next issue): `current_watermark()` and event-time
timers (`timers.register_event_time(ts)`). Until then it speaks of processing time only.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from ..state.handles import ListState, MapState, ValueState


@runtime_checkable
class ProcessContext(Protocol):
    """The current key, its keyed state, and processing-time timers.

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

    def value_state(self, name: str, default: Any = None) -> ValueState[Any]:
        """Register (or fetch) the keyed value state `name`; `value()` gives `default` for a new key.

        Raises:
            ValueError: `name` starts with `__` (reserved), or is registered as another kind.
        """
        ...

    def list_state(self, name: str) -> ListState[Any]:
        """Register (or fetch) the keyed list state `name`.

        Raises:
            ValueError: `name` starts with `__` (reserved), or is registered as another kind.
        """
        ...

    def map_state(self, name: str) -> MapState[Any, Any]:
        """Register (or fetch) the keyed map state `name`.

        Raises:
            ValueError: `name` starts with `__` (reserved), or is registered as another kind.
        """
        ...

    def current_processing_time(self) -> float:
        """Seconds since the epoch by the task's clock (a virtual clock's own seconds in replayed runs)."""
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
