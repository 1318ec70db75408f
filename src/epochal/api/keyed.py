"""KeyedStream: a stream partitioned by key, and the operators that keep state per key.

Each method adds one node to the environment's logical graph (see `api.stream`). The joins of two
keyed streams start here too: `interval_join` and `temporal_join` (`api.joins`); connected
keyed streams (`connect`) are `DataStream.connect` on keyed streams.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from ..config import check_callable, check_choice, check_has_methods
from ..plan.specs import (
    EMITS,
    Emit,
    KeyedCountSpec,
    KeyedProcessSpec,
    KeyedReduceSpec,
    KeySelector,
    Partitioning,
    PartitionKind,
)
from .functions import AggregateFunction, KeyedProcessFunction, _AggregateProcess
from .stream import DataStream, OnErrorChoice, _name_or_unique, on_error_policy

if TYPE_CHECKING:
    from .environment import StreamEnvironment
    from .joins import IntervalJoin, TemporalJoin
    from .windows import WindowedStream


class KeyedStream(DataStream):
    """A stream partitioned by key: the keyed operators below keep state per key."""

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

    def count(self, *, name: str | None = None, emit: Emit = "per_record") -> DataStream:
        """Running count per key: emits `(key, count)` for every record.

        On Arrow batches keyed by a column name the update is vectorized and emits a batch with
        columns `<key>` and `count`, the same records as the per-record path.

        `emit="on_checkpoint"`: instead of one update per record, each key that changed during an
        epoch emits its newest count once, just before the epoch's checkpoint barrier (and at the
        end of the input), so a sink commits one row per changed key per checkpoint.
        """
        key = self._key
        emit = check_choice("emit", emit, EMITS)  # type: ignore[assignment]
        return self._add(lambda n: KeyedCountSpec(n, n, key, emit), "count", name)

    def reduce(
        self, fn: Callable[[Any, Any], Any], *, name: str | None = None, on_error: OnErrorChoice = "fail",
        emit: Emit = "per_record",
    ) -> DataStream:
        """Rolling reduce per key: emits `fn(previous, record)` (the first record as is).

        `fn` should return a new value, not change `previous` in place: the emitted record and
        the key's state are one object. `on_error`: what happens to a record `fn` fails on (see
        `DataStream.map`); the key's value stays what it was before that record.
        `emit="on_checkpoint"`: each key that changed during an epoch emits its newest value
        once, just before the epoch's checkpoint barrier (and at the end of the input).
        """
        check_callable("fn", fn)
        key = self._key
        policy = on_error_policy(self._env, on_error, "reduce")
        emit = check_choice("emit", emit, EMITS)  # type: ignore[assignment]
        return self._add(lambda n: KeyedReduceSpec(n, n, key, fn, policy, emit), "reduce", name)

    def aggregate(
        self, aggregate: AggregateFunction[Any, Any, Any], *, name: str | None = None,
        on_error: OnErrorChoice = "fail",
    ) -> DataStream:
        """Incremental aggregation per key: emits `(key, result)` for every record."""
        check_has_methods("aggregate", aggregate, "AggregateFunction", ("create_accumulator", "add", "get_result"))
        on_error_policy(self._env, on_error, "aggregate")
        return self.process(
            _AggregateProcess(aggregate), name=_name_or_unique(self._env._graph, name, "aggregate"), on_error=on_error
        )

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
