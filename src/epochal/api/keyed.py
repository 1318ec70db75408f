"""KeyedStream: a stream partitioned by key, and the operators that keep state per key.

Each method adds one node to the environment's logical graph (see `api.stream`). The joins of two
keyed streams start here too: `interval_join` and `temporal_join` (`api.joins`); connected
keyed streams (`connect`) are `DataStream.connect` on keyed streams.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ..config import check_has_methods
from ..plan.specs import (
    KeyedProcessSpec,
    KeySelector,
    Partitioning,
    PartitionKind,
)
from .functions import KeyedProcessFunction
from .keyed_aggregates import KeyedAggregates
from .stream import DataStream, OnErrorChoice, on_error_policy

if TYPE_CHECKING:
    from .environment import StreamEnvironment
    from .joins import IntervalJoin, TemporalJoin
    from .windows import WindowedStream


class KeyedStream(DataStream, KeyedAggregates):
    """A stream partitioned by key: the keyed operators below keep state per key (the aggregates,
    count, sum, min, max, mean, reduce and aggregate, come from `KeyedAggregates`)."""

    def __init__(self, env: StreamEnvironment, node_id: int, key: KeySelector) -> None:
        super().__init__(env, node_id, Partitioning(PartitionKind.KEY_GROUP, key))
        self._key = key

    def window(self, window: Any) -> WindowedStream:
        """Cut each key's records into event-time windows: `Tumbling(size)`, `Sliding(size,
        slide)`, `Session(gap)`, or a `DeterministicWindow` (see `epochal.windows`)."""
        from .windows import windowed

        return windowed(self, window)

    def windows(self, windows: Mapping[str, Any]) -> WindowedStream:
        """Several window queries over this stream in one operator, sharing partial aggregates
        (dissertation ch. 5, Cutty); each result names its query."""
        from .windows import windowed

        if not isinstance(windows, Mapping):
            raise TypeError(f"windows must map query names to window definitions, got {windows!r}")
        return windowed(self, windows)

    def process(
        self, function: KeyedProcessFunction, *, name: str | None = None, on_error: OnErrorChoice = "fail"
    ) -> DataStream:
        """Run a keyed process function (keyed state, timers) on every record.

        `on_error`: what happens to a record (or a timer) `process_element` (or `on_timer`)
        fails on (see `DataStream.map`); state it changed before it raised stays changed.
        """
        check_has_methods("function", function, "KeyedProcessFunction", ("process_element",))
        key = self._key
        policy = on_error_policy(self._env, on_error, "process")
        return self._add(lambda n: KeyedProcessSpec(n, n, key, function, policy), "process", name)

    # -- joins with another keyed stream ---------------------------------------------------------
    def interval_join(self, other: KeyedStream) -> IntervalJoin:
        """Join with `other` on the key, where the other record's event time is within bounds
        of this one's: `.between(lower, upper)`, then `.apply(fn)` or `.process(function)`
        (`api.joins`: Flink's interval join, with a left outer variant)."""
        from .joins import IntervalJoin

        return IntervalJoin(self, other)

    def temporal_join(self, table: KeyedStream, *, as_of: str = "event_time") -> TemporalJoin:
        """Join each record with the version of `table` (a stream of versions: each record the
        new value of its key) valid at its event time (`as_of="event_time"`), or the newest
        version when it arrives (`as_of="arrival"`: a lookup join); then `.apply(fn)` or
        `.process(function)` (`api.joins`)."""
        from .joins import TemporalJoin

        return TemporalJoin(self, table, as_of)


__test__ = {"KeyedStream": KeyedStream}
