"""DataStream: the fluent API that records a stream program (keyed streams: `api.keyed`).

Each method adds one node to the environment's logical graph and returns the stream it
produces; nothing runs until `StreamEnvironment.execute`. Every operator gets a unique `name`
(generated from its kind unless given) that appears in errors, metrics and checkpoints; set a
stable `uid` with `.uid(...)` to keep state across program changes. Every operator that runs
user code takes `on_error="fail" | "skip" | "dead_letter"`: what happens to a record the code
fails on (docs/bad-records.md).

Streams are typed: `DataStream[T]` carries records of type `T`, each method says what its result
carries (`map(fn: Callable[[T], R]) -> DataStream[R]`), so mypy infers record types through a
program (tests/api/test_typing.py). A stream is invariant in `T`, as Flink's `DataStream<T>`;
what the types cannot know (a field-name key, Arrow batches from `map_batches`) is `Any`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from typing import TYPE_CHECKING, Any, Generic, Self, TypeVar, overload

from ..errors import GraphError
from ..plan.logical import LogicalEdge
from ..plan.specs import (
    BROADCAST,
    FORWARD,
    REBALANCE,
    AssignTimestampsSpec,
    IterationHeadSpec,
    KeyCheck,
    KeySelector,
    MapBatchesSpec,
    OnError,
    OperatorSpec,
    Partitioning,
    RecordFnKind,
    RecordFnSpec,
    SinkSpec,
    UnionSpec,
)
from ..validation import check_callable, check_has_methods, check_int, check_name
from .checks import OnErrorChoice, WindowTimeChoice, _processes, on_error_policy
from .connector import Sink

if TYPE_CHECKING:
    from ..plan.triggers import Trigger
    from .async_io import AsyncFunction
    from .broadcast import BroadcastStream
    from .co_functions import MapStateDescriptor, OutputTag
    from .connected import BroadcastConnectedStreams, ConnectedStreams
    from .environment import StreamEnvironment
    from .joins import JoinedStreams
    from .keyed import KeyedStream
    from .time import WatermarkStrategy
    from .window_views import AllWindowedStream

T = TypeVar("T")  # a stream's records
R = TypeVar("R")  # what an operator makes of them
K = TypeVar("K")  # a key
T2 = TypeVar("T2")  # another stream's records

class DataStream(Generic[T]):
    """A stream of records produced by one operator.

    Example:
        >>> from epochal import StreamEnvironment
        >>> from epochal.testing import ListSource, CollectSink
        >>> env = StreamEnvironment(parallelism=1, executor="inprocess")
        >>> sink = CollectSink()
        >>> _ = env.from_source(ListSource([1, 2, 3])).map(lambda x: x * 10).sink_to(sink)
        >>> _ = env.execute("times-ten")
        >>> sorted(sink.committed())
        [10, 20, 30]
    """

    def __init__(self, env: StreamEnvironment, node_id: int, partitioning: Partitioning | None = None) -> None:
        self._env = env
        self._node_id = node_id
        self._partitioning = partitioning

    # -- naming and parallelism ------------------------------------------------------------------
    @property
    def name(self) -> str:
        """The operator's unique name."""
        return self._env._builder.spec(self._node_id).name

    def _operator_only(self, what: str) -> None:
        if self._partitioning is not None:
            raise GraphError(
                f"{what} applies to an operator, not to a partitioning (key_by, rebalance, "
                f"broadcast, forward); call it on the operator before or after"
            )

    def set_parallelism(self, parallelism: int) -> Self:
        """Run this operator with `parallelism` subtasks (at most the environment's `max_parallelism`)."""
        self._operator_only("set_parallelism")
        check_int("parallelism", parallelism, maximum=self._env.max_parallelism)
        self._env._builder.set_parallelism(self._node_id, parallelism)
        return self

    def uid(self, uid: str) -> Self:
        """Give the operator a stable id: it names the operator's state in checkpoints."""
        self._operator_only("uid")
        self._env._builder.rename(self._node_id, uid=check_name("uid", uid))
        return self

    def named(self, name: str) -> Self:
        """Rename the operator (the uid follows unless set with `uid`)."""
        self._operator_only("named")
        self._env._builder.rename(self._node_id, name=check_name("name", name))
        return self

    # -- building blocks -------------------------------------------------------------------------
    def _add(self, spec_factory: Callable[[str], OperatorSpec], base: str, name: str | None) -> DataStream[Any]:
        node = self._env._builder.add(spec_factory, base, name, LogicalEdge(self._node_id, self._partitioning))
        return DataStream(self._env, node)

    def _partitioned(self, partitioning: Partitioning) -> DataStream[T]:
        return DataStream(self._env, self._node_id, partitioning)

    # -- stateless operators ---------------------------------------------------------------------
    def map(
        self, fn: Callable[[T], R], *, name: str | None = None, on_error: OnErrorChoice = "fail",
        processes: int | None = None,
    ) -> DataStream[R]:
        """Emit `fn(record)` for every record.

        `on_error`: what happens to a record `fn` raises on: `"fail"` fails the job (after
        its restarts), naming the operator, the record and where it was read; `"skip"` drops
        and counts it (`OperatorMetrics.skipped_records`); `"dead_letter"` sends it to the
        environment's `dead_letter` sink, exactly once. The other operators take it too.

        `processes`: run `fn` in a pool of that many processes of each subtask's own, which
        `JobHandle.resize(name, n)` resizes while the job runs (vertical elasticity,
        `docs/concepts/elasticity.md`); for a CPU-heavy function. `filter` and `flat_map` take it too.
        """
        check_callable("fn", fn)
        policy = on_error_policy(self._env, on_error, "map")
        pool = _processes(processes, fn)
        return self._add(lambda n: RecordFnSpec(n, n, RecordFnKind.MAP, fn, policy, pool), "map", name)

    def filter(
        self, predicate: Callable[[T], object], *, name: str | None = None, on_error: OnErrorChoice = "fail",
        processes: int | None = None,
    ) -> DataStream[T]:
        """Keep the records for which `predicate(record)` is true."""
        check_callable("predicate", predicate)
        policy = on_error_policy(self._env, on_error, "filter")
        pool = _processes(processes, predicate)
        return self._add(lambda n: RecordFnSpec(n, n, RecordFnKind.FILTER, predicate, policy, pool), "filter", name)

    def flat_map(
        self, fn: Callable[[T], Iterable[R]], *, name: str | None = None, on_error: OnErrorChoice = "fail",
        processes: int | None = None,
    ) -> DataStream[R]:
        """Emit every record of the iterable `fn(record)` returns."""
        check_callable("fn", fn)
        policy = on_error_policy(self._env, on_error, "flat_map")
        pool = _processes(processes, fn)
        return self._add(lambda n: RecordFnSpec(n, n, RecordFnKind.FLAT_MAP, fn, policy, pool), "flat_map", name)

    def map_async(
        self, fn: Callable[[T], Awaitable[R]] | AsyncFunction[T, R], *, capacity: int = 100,
        timeout: float | None = 5.0, ordered: bool = True, name: str | None = None, on_error: OnErrorChoice = "fail",
    ) -> DataStream[R]:
        """Emit `await fn(record)` for every record, up to `capacity` requests in flight per
        subtask, on the worker's asyncio event loop (`aiohttp` and other asyncio clients work).

        `fn` is an `async def` or an `epochal.AsyncFunction` (`open`/`close` for a client).
        `ordered`: results in input order, else as they complete (never across a watermark).
        `timeout`: seconds a request may take (None: no limit); a request that times out or
        raises follows `on_error`. Requests in flight at a checkpoint are made again after a
        restore: each result is committed once, each request made at least once.
        """
        from .async_io import async_spec

        return self._add(async_spec(self, fn, capacity, timeout, ordered, on_error), "map_async", name)

    def map_batches(
        self, fn: Callable[[Any], Any], *, name: str | None = None, on_error: OnErrorChoice = "fail"
    ) -> DataStream[Any]:
        """Apply `fn` to whole batches as `pyarrow.RecordBatch`: the vectorized path.

        `fn` returns a `RecordBatch` (or a `pyarrow.Table`). Records that arrive as Python
        objects are converted: scalars to a column `value`, tuples to `f0, f1, …`, dicts by key.
        Downstream per-record operators see each row as a tuple (or the bare value of a
        one-column batch). Under `on_error="skip"` or `"dead_letter"` a batch `fn` fails on is
        halved until the failing rows are found; the others are computed in smaller batches.
        """
        check_callable("fn", fn)
        policy = on_error_policy(self._env, on_error, "map_batches")
        return self._add(lambda n: MapBatchesSpec(n, n, fn, policy), "map_batches", name)

    def union(self, *others: DataStream[T], name: str | None = None) -> DataStream[T]:
        """Merge this stream with others; records keep their per-input order."""
        for other in others:
            if not isinstance(other, DataStream):
                raise TypeError(f"others must be DataStreams, got {other!r} ({type(other).__name__})")
            if other._env is not self._env:
                raise ValueError("others must belong to this stream's environment: cannot union streams of "
                                 "different environments")
        inputs = [LogicalEdge(s._node_id, s._partitioning) for s in (self, *others)]
        node = self._env._builder.add(lambda n: UnionSpec(n, n), "union", name, *inputs)
        return DataStream(self._env, node)

    def iterate(
        self,
        body: Callable[[DataStream[T]], tuple[DataStream[T], DataStream[R]]],
        *,
        name: str | None = None,
        feedback_threshold: int = 8,
        timestamp: str | int | Callable[[Any], Any] | None = None,
    ) -> DataStream[R]:
        """A loop: `body` maps the loop's stream to `(feedback, output)`; feedback flows back in.

        The loop's stream carries this stream's records and every feedback record. Checkpoints
        stay exactly-once: the loop head logs what is in flight while a barrier goes round
        (ABS §4.3, Algorithm 2). A bounded job ends once its input is exhausted and no record is
        left anywhere in the loop. Loops nest: the body may call `iterate` itself, and each
        loop ends, and tracks its event time, on its own (dissertation ch. 6).

        Args:
            body: builds the loop from its input stream; returns the stream to feed back (it may
                be partitioned, e.g. `key_by`) and the stream that leaves the loop.
            feedback_threshold: batches of feedback buffered at the head past which the head
                reads only feedback, so that a heavy loop drains instead of filling up.
            timestamp: where a record of the loop has its event time (a field or column name,
                a tuple index, or a function of the record), for a loop whose event time
                matters: the loop then holds the watermark until no record older is left in
                it, so nothing the loop emits is late, inside it or after it. Records the loop
                derives must be no older than what they derive from. Without it, the watermark
                passes the loop once, from its input.

        Example:
            >>> from epochal import StreamEnvironment
            >>> from epochal.testing import ListSource, CollectSink
            >>> env = StreamEnvironment(parallelism=1, executor="inprocess")
            >>> sink = CollectSink()
            >>> def halve(loop):
            ...     halved = loop.map(lambda n: n // 2)
            ...     return halved.filter(lambda n: n > 0), halved
            >>> _ = env.from_source(ListSource([8])).iterate(halve).sink_to(sink)
            >>> _ = env.execute("halving")
            >>> sorted(sink.committed())
            [0, 1, 2, 4]
        """
        check_callable("body", body)
        check_int("feedback_threshold", feedback_threshold)
        from .time import _event_time

        event_time = None if timestamp is None else _event_time(timestamp)
        builder = self._env._builder
        head = builder.add(
            lambda n: IterationHeadSpec(n, n, feedback_threshold, event_time), "iterate", name,
            LogicalEdge(self._node_id, self._partitioning),
        )
        op_name = builder.spec(head).name
        result = body(DataStream[T](self._env, head))
        if not (isinstance(result, tuple) and len(result) == 2 and all(isinstance(s, DataStream) for s in result)):
            raise GraphError(f"iterate {op_name!r}: the body must return (feedback, output) streams")
        feedback, output = result
        if feedback._env is not self._env:
            raise GraphError(f"iterate {op_name!r}: the feedback stream belongs to another environment")
        builder.close_loop(head, LogicalEdge(feedback._node_id, feedback._partitioning, feedback=True))
        return output

    # -- windows over the whole stream -----------------------------------------------------------
    def window_all(self, window: Any, *, time: WindowTimeChoice = "event", trigger: Trigger | None = None
                   ) -> AllWindowedStream[T]:
        """Windows over every record of the stream, not keyed: one window operator with
        parallelism 1 holds them all (Flink's `windowAll`); results leave the key out:
        `(window_start, window_end, result)`. Takes what `KeyedStream.window` takes."""
        from ..plan.triggers import one_key
        from .keyed import KeyedStream
        from .window_views import AllWindowedStream
        from .windows import windowed

        keyed: KeyedStream[Any, T] = KeyedStream(self._env, self._node_id, one_key)
        return AllWindowedStream(windowed(keyed, window, time, trigger, keyless=True))

    def count_window_all(self, size: int, slide: int | None = None) -> AllWindowedStream[T]:
        """Count windows over every record of the stream (parallelism 1; see `count_window`)."""
        from ..plan.triggers import one_key
        from .keyed import KeyedStream
        from .window_views import AllWindowedStream
        from .windows import count_windowed

        keyed: KeyedStream[Any, T] = KeyedStream(self._env, self._node_id, one_key)
        return AllWindowedStream(count_windowed(keyed, size, slide, keyless=True))

    # -- partitioning ----------------------------------------------------------------------------
    def assign_timestamps(
        self, watermarks: WatermarkStrategy, *, name: str | None = None, on_error: OnErrorChoice = "fail"
    ) -> DataStream[T]:
        """Read event time from this stream's records and generate watermarks from them here.

        Watermarks from upstream end at this operator; its own follow the largest timestamp it
        has seen, less the strategy's delay (one generator per subtask). `on_error`: what
        happens to a record without a timestamp (see `map`).
        """
        from .time import WatermarkStrategy

        if not isinstance(watermarks, WatermarkStrategy):
            raise TypeError(f"watermarks must be a WatermarkStrategy, got {watermarks!r}")
        spec = watermarks.spec
        policy = on_error_policy(self._env, on_error, "assign_timestamps")
        return self._add(lambda n: AssignTimestampsSpec(n, n, spec, policy), "assign_timestamps", name)

    @overload
    def key_by(self, key: Callable[[T], K], *, on_error: OnErrorChoice = "fail") -> KeyedStream[K, T]: ...
    @overload
    def key_by(self, key: str, *, on_error: OnErrorChoice = "fail") -> KeyedStream[Any, T]: ...

    def key_by(self, key: KeySelector, *, on_error: OnErrorChoice = "fail") -> KeyedStream[Any, T]:
        """Partition by key: a function of the record, or a field name (Arrow column or dict key).

        `on_error`: what happens to a record the key selector fails on, or whose key has no
        stable hash (see `map`). Other than `"fail"`, it adds an operator `key_by` that
        computes each record's key once more, before the records are partitioned.
        """
        if not callable(key):
            if not isinstance(key, str):
                raise TypeError(f"key must be a function or a field name (str), got {key!r} ({type(key).__name__})")
            check_name("key", key)
        from .keyed import KeyedStream

        policy = on_error_policy(self._env, on_error, "key_by")
        if policy is OnError.FAIL:
            return KeyedStream(self._env, self._node_id, key)
        builder = self._env._builder
        checked = self._add(
            lambda n: RecordFnSpec(n, n, RecordFnKind.KEY_CHECK, KeyCheck(key), policy), "key_by", None
        )
        builder.set_parallelism(checked._node_id, builder.parallelism(self._node_id))  # chains
        return KeyedStream(self._env, checked._node_id, key)

    def rebalance(self) -> DataStream[T]:
        """Spread batches round robin over the next operator's subtasks."""
        return self._partitioned(REBALANCE)

    @overload
    def broadcast(self) -> DataStream[T]: ...
    @overload
    def broadcast(self, state: MapStateDescriptor, /, *states: MapStateDescriptor) -> BroadcastStream[T]: ...

    def broadcast(self, *states: Any) -> DataStream[T] | BroadcastStream[T]:
        """Send every record to every subtask of the next operator.

        With `MapStateDescriptor`s, the result is a `BroadcastStream` to `connect` another stream
        to, whose `BroadcastProcessFunction` keeps these broadcast states (`api.broadcast`)."""
        if states:
            from .broadcast import BroadcastStream

            return BroadcastStream(self, states)
        return self._partitioned(BROADCAST)

    def forward(self) -> DataStream[T]:
        """Keep records on the same subtask index (needs equal parallelism)."""
        return self._partitioned(FORWARD)

    # -- two inputs and side outputs --------------------------------------------------------------
    @overload
    def connect(self, other: BroadcastStream[T2]) -> BroadcastConnectedStreams[T, T2]: ...
    @overload
    def connect(self, other: DataStream[T2]) -> ConnectedStreams[T, T2]: ...

    def connect(self, other: DataStream[T2] | BroadcastStream[T2]
                ) -> ConnectedStreams[T, T2] | BroadcastConnectedStreams[T, T2]:
        """Connect with another stream into one operator with two inputs (`api.connected`):
        `map`/`flat_map`/`process` with a `CoProcessFunction`, or with a keyed function when both
        are keyed; with a `BroadcastStream`, `process` with a broadcast function."""
        from .connected import connect

        return connect(self, other)

    def join(self, other: DataStream[T2]) -> JoinedStreams[T, T2]:
        """A window join with `other`: `.where(key).equal_to(other_key).window(Tumbling(10))`,
        then `.apply(fn)` (`api.joins`: on the windows' shared slices)."""
        from .joins import JoinedStreams

        return JoinedStreams(self, other)

    def side_output(self, tag: OutputTag | str, *, name: str | None = None) -> DataStream[Any]:
        """The records this operator's functions sent to `tag` (`ctx.output(tag, record)`), as a
        stream of their own; exactly once, as any stream (`plan.side_outputs`)."""
        from .connected import side_output

        self._operator_only("side_output")
        return side_output(self, self._node_id, tag, name)

    # -- sinks -----------------------------------------------------------------------------------
    def sink_to(self, sink: Sink, *, name: str | None = None) -> DataStream[Any]:
        """Write the stream to `sink`; exactly once if the sink commits per checkpoint."""
        check_has_methods("sink", sink, "Sink", ("create_writer",))
        return self._add(lambda n: SinkSpec(n, n, sink), "sink", name)


# `epochal/__init__.py` re-homes these classes to `epochal`; list them so doctest still finds them.
__test__ = {"DataStream": DataStream}


