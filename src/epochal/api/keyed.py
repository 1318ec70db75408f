"""KeyedStream: a stream partitioned by key, and the operators that keep state per key.

Each method adds one node to the environment's logical graph (see `api.stream`). The joins of two
keyed streams start here too: `interval_join` and `temporal_join` (`api.joins`); connected
keyed streams (`connect`) are `DataStream.connect` on keyed streams.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from ..plan.specs import (
    TIMERS_AT_END,
    KeyedProcessSpec,
    KeySelector,
    Partitioning,
    PartitionKind,
    TimersAtEnd,
)
from ..validation import check_choice, check_has_methods
from .checks import OnErrorChoice, WindowTimeChoice, on_error_policy
from .functions import KeyedProcessFunction
from .keyed_aggregates import KeyedAggregates
from .stream import DataStream

if TYPE_CHECKING:
    from ..plan.triggers import Trigger
    from .environment import StreamEnvironment
    from .joins import IntervalJoin, TemporalJoin
    from .window_views import NamedWindowedStream
    from .windows import WindowedStream

K = TypeVar("K")  # the key
T = TypeVar("T")  # the records
R = TypeVar("R")  # what an operator makes of them
T2 = TypeVar("T2")  # another stream's records


class KeyedStream(DataStream[T], KeyedAggregates[K, T], Generic[K, T]):
    """A stream partitioned by key: the keyed operators below keep state per key (the aggregates,
    count, sum, min, max, mean, reduce and aggregate, come from `KeyedAggregates`). Typed as
    `KeyedStream[K, T]`: keys of type `K` (`Any` for a field name), records of type `T`."""

    def __init__(self, env: StreamEnvironment, node_id: int, key: KeySelector) -> None:
        super().__init__(env, node_id, Partitioning(PartitionKind.KEY_GROUP, key))
        self._key = key

    def window(self, window: Any, *, time: WindowTimeChoice = "event", trigger: Trigger | None = None
               ) -> WindowedStream[K, T]:
        """Cut each key's records into windows: `Tumbling(size)`, `Sliding(size, slide)`,
        `Session(gap)`, or a `DeterministicWindow` (see `epochal.windows`).

        `time`: `"event"` (the records' times; the watermark completes windows) or
        `"processing"` (the task's clock when a record arrives). `trigger`: when windows emit
        (`EventTimeTrigger()`, `ProcessingTimeTrigger()`, `CountTrigger(n)`, with early firings
        or purging; `epochal.windows`).
        """
        from .windows import windowed

        return windowed(self, window, time, trigger)

    def windows(self, windows: Mapping[str, Any], *, time: WindowTimeChoice = "event",
                trigger: Trigger | None = None) -> NamedWindowedStream[K, T]:
        """Several window queries over this stream in one operator, sharing partial aggregates
        (dissertation ch. 5, Cutty); each result names its query."""
        from .window_views import NamedWindowedStream
        from .windows import windowed

        if not isinstance(windows, Mapping):
            raise TypeError(f"windows must map query names to window definitions, got {windows!r}")
        return NamedWindowedStream(windowed(self, windows, time, trigger))

    def count_window(self, size: int, slide: int | None = None) -> WindowedStream[K, T]:
        """Windows of each key's records by count (Flink's `countWindow`): every `slide` records
        of a key (default `size`), a window of its last `size` (fewer at its start); results
        `(key, first index, end index, result)`. A window not complete when the input ends does
        not fire."""
        from .windows import count_windowed

        return count_windowed(self, size, slide)

    def process(
        self, function: KeyedProcessFunction[K, T, R], *, name: str | None = None, on_error: OnErrorChoice = "fail",
        timers_at_end: TimersAtEnd = "report",
    ) -> DataStream[R]:
        """Run a keyed process function (keyed state, timers) on every record.

        `on_error`: what happens to a record (or a timer) `process_element` (or `on_timer`)
        fails on (see `DataStream.map`); state it changed before it raised stays changed.
        `timers_at_end`: what processing-time timers still pending when the input ends do:
        `"report"` hands them to `on_end_of_input` unfired, `"fire"` fires them first (in time
        order, as if the clock reached the last of them).
        """
        check_has_methods("function", function, "KeyedProcessFunction", ("process_element",))
        key = self._key
        policy = on_error_policy(self._env, on_error, "process")
        at_end: TimersAtEnd = check_choice("timers_at_end", timers_at_end, TIMERS_AT_END)  # type: ignore[assignment]
        return self._add(lambda n: KeyedProcessSpec(n, n, key, function, policy, at_end), "process", name)

    # -- joins with another keyed stream ---------------------------------------------------------
    def interval_join(self, other: KeyedStream[K, T2]) -> IntervalJoin[K, T, T2]:
        """Join with `other` on the key, where the other record's event time is within bounds
        of this one's: `.between(lower, upper)`, then `.apply(fn)` or `.process(function)`
        (`api.joins`: Flink's interval join, with a left outer variant)."""
        from .joins import IntervalJoin

        return IntervalJoin(self, other)

    def temporal_join(self, table: KeyedStream[K, T2], *, as_of: str = "event_time") -> TemporalJoin[K, T, T2]:
        """Join each record with the version of `table` (a stream of versions: each record the
        new value of its key) valid at its event time (`as_of="event_time"`), or the newest
        version when it arrives (`as_of="arrival"`: a lookup join); then `.apply(fn)` or
        `.process(function)` (`api.joins`)."""
        from .joins import TemporalJoin

        return TemporalJoin(self, table, as_of)


__test__ = {"KeyedStream": KeyedStream}
