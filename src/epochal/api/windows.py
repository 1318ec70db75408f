"""Windows for users: a keyed stream cut into windows, and what each computes.

In event time (the default), in processing time (`time="processing"`), or by count
(`count_window`); `window_all` for a stream that is not keyed (one subtask); a trigger decides
when windows emit (`plan.triggers`: early firings, count triggers, purging).

`keyed.window(Sliding(60, 10))` (one query) or `keyed.windows({"1m": Tumbling(60), ...})` (several
queries over one stream, sharing partial aggregates: the dissertation's ch. 5, Cutty), then
`.allowed_lateness(...)` and one of `count()`, `sum(f)`, `min(f)`, `max(f)`, `reduce(fn)`,
`aggregate(function)`, `process(function)`. Each takes `on_error` (docs/bad-records.md): what
happens to a record whose event time or value cannot be read or that the window's function fails
on while it is added, and to a window a process function fails on.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Generic, Self, TypeVar

from ..errors import GraphError
from ..plan.aggregates import window_combinable
from ..plan.event_time import event_time_of
from ..plan.logical import LogicalEdge
from ..plan.specs import KeyedWindowSpec, OutputPart, SplitLateSpec, WindowFunctionKind
from ..plan.time import Duration, seconds
from ..plan.triggers import WINDOW_TIMES, Trigger, WindowTime, check_trigger, count_window
from ..plan.windows import DeterministicWindow, check_window
from ..validation import check_bool, check_callable, check_choice, check_has_methods, check_name
from .checks import OnErrorChoice, on_error_policy
from .functions import AggregateFunction, ProcessWindowFunction
from .keyed import KeyedStream
from .stream import DataStream

if TYPE_CHECKING:
    from .co_functions import OutputTag

Value = str | int | Callable[[Any], Any] | None
K = TypeVar("K")
T = TypeVar("T")
R = TypeVar("R")
# a window's result row: `(key, window_start, window_end, result)` (`api.window_views` for the
# rows of named queries and of `window_all`)
Row = tuple[K, float, float, R]


class WindowedStream(Generic[K, T]):
    """A keyed stream cut into windows; choose what each window computes.

    Results are `(key, window_start, window_end, result)` tuples, or with several named queries
    `(key, query, window_start, window_end, result)`; on Arrow batches keyed by a column, a batch
    with columns `<key>`, (`window`,) `window_start`, `window_end` and the result column. A window
    fires once when the watermark passes its end; a late record within the allowed lateness fires
    it again with the updated result; a record past that goes to `late_records()`.
    """

    def __init__(self, keyed: KeyedStream[K, T], queries: tuple[tuple[str, Any], ...], named: bool,
                 time: WindowTime = WindowTime.EVENT, keyless: bool = False) -> None:
        self._keyed = keyed
        self._queries = queries
        self._named = named
        self._lateness = 0.0
        self._time = time
        self._trigger: Trigger | None = None
        self._keyless = keyless

    def allowed_lateness(self, lateness: Duration) -> WindowedStream[K, T]:
        """Keep windows open for late records this long after their end (seconds or timedelta)."""
        if self._time is not WindowTime.EVENT:
            raise GraphError("allowed_lateness applies to event-time windows: in processing time and by "
                             "count no record is late")
        self._lateness = seconds(lateness, "lateness")
        return self

    def trigger(self, trigger: Trigger) -> WindowedStream[K, T]:
        """When windows emit: `EventTimeTrigger()` (the default in event time),
        `ProcessingTimeTrigger()` (in processing time), `CountTrigger(n)`, each with
        `.with_early_firings(every=...)` and `.purging()` (`epochal.windows`)."""
        try:
            self._trigger = check_trigger(trigger, self._time, self._queries)
        except ValueError as exc:
            raise GraphError(str(exc)) from None
        return self

    def count(self, *, name: str | None = None, on_error: OnErrorChoice = "fail",
              combine: bool | None = None) -> WindowResults[Row[K, int]]:
        """The number of records in each window.

        `combine`: count per key and slice before the key exchange too (a local phase: one row
        per key and slice crosses, not one per record; `plan.local_global`). By default on
        where it can be: periodic windows (`Tumbling`, `Sliding`) keyed by a column, event time
        in a field, without `late_records()`; a window's results are the same either way (the
        `late_records` metric then counts late partial rows, not records)."""
        return self._build(WindowFunctionKind.COUNT, None, None, name, on_error, combine)

    def sum(self, value: Value = None, *, name: str | None = None, on_error: OnErrorChoice = "fail",
            combine: bool | None = None) -> WindowResults[Row[K, Any]]:
        """The sum of `value` (a field name, a tuple index, or a function; None: the record).
        `combine`: as for `count` (a numeric column `value`)."""
        return self._build(WindowFunctionKind.SUM, _value(value), None, name, on_error, combine)

    def min(self, value: Value = None, *, name: str | None = None, on_error: OnErrorChoice = "fail",
            combine: bool = False) -> WindowResults[Row[K, Any]]:
        """The smallest `value` of each window. `combine=True`: as for `count`, for a numeric
        column (off by default: a column of strings has no columnar partials)."""
        return self._build(WindowFunctionKind.MIN, _value(value), None, name, on_error, combine)

    def max(self, value: Value = None, *, name: str | None = None, on_error: OnErrorChoice = "fail",
            combine: bool = False) -> WindowResults[Row[K, Any]]:
        """The largest `value` of each window. `combine=True`: as for `min`."""
        return self._build(WindowFunctionKind.MAX, _value(value), None, name, on_error, combine)

    def reduce(
        self, fn: Callable[[T, T], T], *, name: str | None = None, on_error: OnErrorChoice = "fail"
    ) -> WindowResults[Row[K, T]]:
        """`fn` folded over each window's records; associative and commutative, since windows
        combine the partial results of the slices they share."""
        check_callable("fn", fn)
        return self._build(WindowFunctionKind.REDUCE, None, fn, name, on_error)

    def aggregate(self, function: AggregateFunction[T, Any, R], *, name: str | None = None,
                  on_error: OnErrorChoice = "fail") -> WindowResults[Row[K, R]]:
        """An `AggregateFunction` with `merge(a, b)`, which combines the accumulators of slices."""
        check_has_methods("function", function, "AggregateFunction",
                          ("create_accumulator", "add", "merge", "get_result"))
        return self._build(WindowFunctionKind.AGGREGATE, None, function, name, on_error)

    def process(
        self, function: ProcessWindowFunction[K, T, R], *, name: str | None = None, on_error: OnErrorChoice = "fail"
    ) -> WindowResults[R]:
        """Call `function.process(key, window, records)` with each window's records, in
        event-time order; it returns (or yields) the records to emit."""
        check_has_methods("function", function, "ProcessWindowFunction", ("process",))
        return self._build(WindowFunctionKind.PROCESS, None, function, name, on_error)

    def _build(
        self, kind: WindowFunctionKind, value: Value, function: Any, name: str | None, on_error: OnErrorChoice,
        combine: bool | None = False,
    ) -> WindowResults[Any]:
        keyed = self._keyed
        env = keyed._env
        builder = env._builder
        policy = on_error_policy(env, on_error, kind.value)
        event_time = event_time_of(builder.graph, keyed._node_id) if self._time is WindowTime.EVENT else None
        if event_time is None and self._time is WindowTime.EVENT:
            raise GraphError(
                "windows need event time: give the source a watermark strategy "
                "(env.from_source(source, watermarks=WatermarkStrategy...)) or call assign_timestamps "
                "before key_by; or cut windows in processing time (time='processing') or by count"
            )
        op_name = builder.name(name, kind.value)
        spec = KeyedWindowSpec(
            op_name, op_name, keyed._key, self._queries, kind, event_time, value, function,
            self._lateness, self._named, on_error=policy, time=self._time, trigger=self._trigger,
            keyless=self._keyless,
        )
        if combine is None:
            spec = replace(spec, combine=window_combinable(spec))
        elif check_bool("combine", combine):
            if not window_combinable(spec):
                raise GraphError(f"{kind.value}(combine=True) needs periodic windows (Tumbling, Sliding) keyed by a "
                                 "column, event time in a field, a column as the value, and on_error='fail'")
            spec = replace(spec, combine=True)
        window = builder.add_spec(spec, LogicalEdge(keyed._node_id, keyed._partitioning))
        results = builder.add(
            lambda n: SplitLateSpec(n, n, OutputPart.RESULTS), f"{op_name}-results", None, LogicalEdge(window, None)
        )
        if self._keyless:  # every record in one window operator: one subtask (`window_all`)
            builder.set_parallelism(window, 1)
            builder.set_parallelism(results, 1)
        return WindowResults(env, results, window, keyless=self._keyless)


def _value(value: Value) -> Value:
    if value is None or callable(value) or (isinstance(value, (str, int)) and not isinstance(value, bool)):
        return value
    raise TypeError(f"value must be a field name, a tuple index or a function of the record, got {value!r}")


def windowed(keyed: KeyedStream[K, T], windows: Any, time: str = "event", trigger: Trigger | None = None,
             keyless: bool = False) -> WindowedStream[K, T]:
    """`keyed.window(spec)` and `keyed.windows({name: spec})`, in event or processing time."""
    domain = WindowTime(check_choice("time", time, WINDOW_TIMES))
    if isinstance(windows, Mapping):
        if not windows:
            raise ValueError("windows needs at least one window query")
        queries = tuple((str(n), check_window(s, f"windows[{n!r}]")) for n, s in windows.items())
        stream = WindowedStream(keyed, queries, named=True, time=domain, keyless=keyless)
    else:
        stream = WindowedStream(keyed, (("window", check_window(windows, "window")),), named=False, time=domain,
                                keyless=keyless)
    if domain is WindowTime.PROCESSING and any(isinstance(s, DeterministicWindow) for _, s in stream._queries):
        raise GraphError("a user-defined window runs in event time (its records in event-time order)")
    return stream if trigger is None else stream.trigger(trigger)


def count_windowed(keyed: KeyedStream[K, T], size: int, slide: int | None, keyless: bool = False
                   ) -> WindowedStream[K, T]:
    """`keyed.count_window(size, slide)`: windows of a key's last `size` records, every `slide`."""
    try:
        window = count_window(size, slide)
    except ValueError as exc:
        raise GraphError(str(exc)) from None
    return WindowedStream(keyed, (("window", window),), named=False, time=WindowTime.COUNT, keyless=keyless)


class WindowResults(DataStream[R]):
    """The results of a window operator; `late_records()` is the stream of records too late."""

    def __init__(self, env: Any, node_id: int, window_node: int, keyless: bool = False) -> None:
        super().__init__(env, node_id)
        self._window_node = window_node
        self._keyless = keyless

    def set_parallelism(self, parallelism: int) -> Self:
        """Run the results with `parallelism` subtasks; `window_all` runs on one, always.

        Raises:
            GraphError: `window_all`'s results at another parallelism than 1.
        """
        if self._keyless and parallelism != 1:
            raise GraphError("window_all collects every record in one window operator: its parallelism is 1")
        return super().set_parallelism(parallelism)

    def uid(self, uid: str) -> Self:
        """Give the window operator a stable id: it names the windows' state in checkpoints (and
        in state queries); its results keep `<uid>-results`."""
        super().uid(f"{check_name('uid', uid)}-results")
        self._env._builder.rename(self._window_node, uid=uid)
        return self

    def side_output(self, tag: OutputTag | str, *, name: str | None = None) -> DataStream[Any]:
        """What the window's `ProcessWindowFunction` sent to `tag` (`ctx.output(tag, record)`,
        with `process(key, window, records, ctx)`), as a stream of its own."""
        from .connected import side_output

        return side_output(self, self._window_node, tag, name)

    def late_records(self, *, name: str | None = None) -> DataStream[Any]:
        """The records that came after their windows closed (end + allowed lateness), as they
        were; without this call they are only counted."""
        builder = self._env._builder
        builder.update(self._window_node, emit_late=True)
        late = builder.add(lambda n: SplitLateSpec(n, n, OutputPart.LATE), "late_records", name,
                           LogicalEdge(self._window_node, None))
        return DataStream[Any](self._env, late)
