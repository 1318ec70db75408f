"""Joins of two streams on event time: interval, window and temporal joins.

- `left.key_by(f).interval_join(right.key_by(g)).between(lower, upper)`: pairs whose right time
  is within `[left time + lower, left time + upper]` (Flink's interval join).
- `left.join(right).where(f).equal_to(g).window(Tumbling(10))`: pairs in the same window, on the
  windows' shared slices (each record kept once, not once per window as Flink does).
- `left.key_by(f).temporal_join(versions.key_by(g))`: each record with the version of the table
  valid at its time (or, `as_of="arrival"`, the newest when it arrives: a lookup join).

Each ends with `.apply(fn=None, how="inner")` (one record per pair: `fn(left, right)`, or the
pair `(left, right)` without a function) or `.process(ProcessJoinFunction, how=...)`; `how="left"`
also emits `(left, None)` for a left record that met no right record; `how="semi"` emits each
left record that met a right one, once (Spark's left semi join). Keys are functions or field
names (an Arrow column, a dict key); on Arrow batches keys and times are read vectorized. The
result is a `JoinResults` stream, whose `late_records("left")` / `late_records("right")` are the
records that came too late to be joined: never silently dropped.
"""

from __future__ import annotations

import datetime as _dt
import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Generic, Literal, TypeVar, overload

from ..errors import GraphError
from ..plan.event_time import event_time_of
from ..plan.time import Duration, EventTime, seconds
from ..plan.two_inputs import (
    LATE_TAGS,
    IntervalJoinSpec,
    JoinInput,
    JoinOutput,
    JoinType,
    TemporalJoinSpec,
    TemporalMode,
    WindowJoinSpec,
    join_schema,
)
from ..plan.windows import Sliding, Tumbling
from ..validation import check_callable, check_choice, check_has_methods
from .checks import OnErrorChoice, on_error_policy
from .connected import add_two_input, side_output
from .stream import DataStream

if TYPE_CHECKING:
    from .co_functions import ProcessJoinFunction
    from .keyed import KeyedStream

How = Literal["inner", "left", "semi"]
HOWS: tuple[How, ...] = ("inner", "left", "semi")
SIDES = ("left", "right")
K = TypeVar("K")  # the key both sides share
L = TypeVar("L")  # the left side's records
R = TypeVar("R")  # the right side's records
OUT = TypeVar("OUT")  # what the join emits


class JoinResults(DataStream[OUT]):
    """The results of a join; `late_records(side)` are the records of one side that came too late."""

    def late_records(self, side: Literal["left", "right"] = "left", *, name: str | None = None) -> DataStream[Any]:
        """The records of input `side` ("left" or "right") that arrived behind the watermark,
        too late to be joined exactly, as they were; without this call they are only counted
        (`OperatorMetrics.late_records`)."""
        check_choice("side", side, SIDES)
        return side_output(self, self._node_id, LATE_TAGS[SIDES.index(side)], name, reserved=True)


def _event_time(stream: DataStream[Any], what: str, required: bool = True) -> EventTime | None:
    found = event_time_of(stream._env._graph, stream._node_id)
    if found is None and required:
        raise GraphError(
            f"{what} needs event time on both inputs: give each source a watermark strategy "
            "(env.from_source(source, watermarks=WatermarkStrategy...)) or call assign_timestamps before key_by"
        )
    return found


def _signed_seconds(value: Duration | float, name: str) -> float:
    if isinstance(value, _dt.timedelta):
        out = value.total_seconds()
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        out = float(value)
    else:
        raise TypeError(f"{name} must be seconds (int or float) or a datetime.timedelta, got {value!r}")
    if not math.isfinite(out):
        raise ValueError(f"{name} must be finite, got {value!r}")
    return out


def _output(function: Any, process: bool, how: str, schemas: Any = None) -> JoinOutput:
    how = check_choice("how", how, HOWS)
    if process:
        check_has_methods("function", function, "ProcessJoinFunction", ("process_element",))
    elif function is not None:
        check_callable("fn", function)
    if schemas is None:
        return JoinOutput(JoinType(how), function, process)
    import pyarrow as pa

    if function is not None:
        raise GraphError("a join emits Arrow rows of `schemas` only without a function: pass one or the other")
    if not (isinstance(schemas, tuple) and len(schemas) == 2 and all(isinstance(x, pa.Schema) for x in schemas)):
        raise TypeError(f"schemas must be (left schema, right schema), two pyarrow.Schema, got {schemas!r}")
    schema, width = join_schema(schemas[0], schemas[1], JoinType(how))
    return JoinOutput(JoinType(how), None, False, schema, width)


class _Terminal(Generic[L, R]):
    """`.apply(fn)` and `.process(function)`: what ends every join's builder. Typed: the pair
    `(left, right)` (right `None` in a left outer join), `fn`'s result, or the left record."""

    _left: DataStream[L]
    _right: DataStream[R]
    _kind = "join"

    @overload
    def apply(self, fn: None = None, *, how: Literal["inner"] = "inner", name: str | None = None,
              on_error: OnErrorChoice = "fail", schemas: None = None) -> JoinResults[tuple[L, R]]: ...
    @overload
    def apply(self, fn: None = None, *, how: Literal["left"], name: str | None = None,
              on_error: OnErrorChoice = "fail", schemas: None = None) -> JoinResults[tuple[L, R | None]]: ...
    @overload
    def apply(self, fn: None = None, *, how: Literal["semi"], name: str | None = None,
              on_error: OnErrorChoice = "fail", schemas: None = None) -> JoinResults[L]: ...
    @overload
    def apply(self, fn: Callable[[L, R], OUT], *, how: Literal["inner"] = "inner", name: str | None = None,
              on_error: OnErrorChoice = "fail", schemas: None = None) -> JoinResults[OUT]: ...
    @overload
    def apply(self, fn: Callable[[L, R | None], OUT], *, how: Literal["left", "semi"], name: str | None = None,
              on_error: OnErrorChoice = "fail", schemas: None = None) -> JoinResults[OUT]: ...
    @overload
    def apply(self, fn: None = None, *, how: How = "inner", name: str | None = None,
              on_error: OnErrorChoice = "fail", schemas: Any) -> JoinResults[Any]: ...

    def apply(self, fn: Callable[[Any, Any], Any] | None = None, *, how: How = "inner", name: str | None = None,
              on_error: OnErrorChoice = "fail", schemas: Any = None) -> JoinResults[Any]:
        """Emit `fn(left, right)` per pair (without `fn`: the pair `(left, right)`); `how="left"`:
        also `fn(left, None)` for each left record no right record met; `how="semi"`: each left
        record that met a right record, once (per window in a window join), as it is (with `fn`:
        `fn(left, None)`).

        `schemas`: `(left schema, right schema)` of Arrow inputs, instead of `fn`: the results are
        Arrow batches, one row per pair, the left's columns then the right's (a right column whose
        name the left has gets `right_`; nulls for an unmatched left record; a semi join's rows
        are the left's columns).

        `on_error`: what happens to a record whose key or time cannot be read, and to a pair
        `fn` fails on (see `DataStream.map`)."""
        return self._build(_output(fn, False, how, schemas), name, on_error)

    def process(self, function: ProcessJoinFunction[L, R, OUT], *, how: How = "inner", name: str | None = None,
                on_error: OnErrorChoice = "fail") -> JoinResults[OUT]:
        """Call `function.process_element(left, right, ctx)` (a `ProcessJoinFunction`) per pair."""
        return self._build(_output(function, True, how), name, on_error)

    def _build(self, output: JoinOutput, name: str | None, on_error: OnErrorChoice) -> JoinResults[Any]:
        env = self._left._env
        policy = on_error_policy(env, on_error, self._kind)
        op_name = env._builder.name(name, self._kind)
        spec = self._spec(op_name, output, policy)
        return JoinResults[Any](env, add_two_input(self._left, self._right, spec))

    def _spec(self, name: str, output: JoinOutput, policy: Any) -> Any:
        raise NotImplementedError


def _keyed(stream: Any, what: str) -> Any:
    from .keyed import KeyedStream

    if not isinstance(stream, KeyedStream):
        raise TypeError(f"{what} joins keyed streams: key_by both, got {stream!r} ({type(stream).__name__})")
    return stream


class IntervalJoin(Generic[K, L, R]):
    """`left.interval_join(right)`: set the bounds with `between`."""

    def __init__(self, left: KeyedStream[K, L], right: KeyedStream[K, R]) -> None:
        self.left = _keyed(left, "interval_join")
        self.right = _keyed(right, "interval_join")
        if left._env is not right._env:
            raise ValueError("both streams must belong to the same environment")

    def between(self, lower: Duration | float, upper: Duration | float, *, lower_inclusive: bool = True,
                upper_inclusive: bool = True) -> IntervalJoined[L, R]:
        """Join a left record at `t` with the right records in `[t + lower, t + upper]` (seconds
        or `timedelta`; `lower` may be negative; an end is open when not inclusive)."""
        low, high = _signed_seconds(lower, "lower"), _signed_seconds(upper, "upper")
        if low > high:
            raise ValueError(f"lower must not be above upper, got [{low}, {high}]")
        return IntervalJoined(self.left, self.right, low, high, bool(lower_inclusive), bool(upper_inclusive))


class IntervalJoined(_Terminal[L, R]):
    """An interval join with its bounds: end it with `apply` or `process`."""

    _kind = "interval_join"

    def __init__(self, left: KeyedStream[Any, L], right: KeyedStream[Any, R], lower: float, upper: float,
                 lower_inclusive: bool, upper_inclusive: bool) -> None:
        self._left, self._right = left, right
        self._bounds = (lower, upper, lower_inclusive, upper_inclusive)

    def _spec(self, name: str, output: JoinOutput, policy: Any) -> IntervalJoinSpec:
        left, right = self._left, self._right
        sides = (JoinInput(left._key, _event_time(left, "interval_join")),  # type: ignore[attr-defined]
                 JoinInput(right._key, _event_time(right, "interval_join")))  # type: ignore[attr-defined]
        lower, upper, lower_inclusive, upper_inclusive = self._bounds
        return IntervalJoinSpec(name, name, *sides, lower, upper, lower_inclusive, upper_inclusive, output=output,
                                on_error=policy)


class JoinedStreams(Generic[L, R]):
    """`left.join(right)`: name the keys with `where` and `equal_to`, then the `window`."""

    def __init__(self, left: DataStream[L], right: DataStream[R]) -> None:
        if not isinstance(right, DataStream):
            raise TypeError(f"join takes a DataStream, got {right!r} ({type(right).__name__})")
        if left._env is not right._env:
            raise ValueError("both streams must belong to the same environment")
        self._left, self._right = left, right
        self._keys: list[Any] = []

    def where(self, key: Callable[[L], Any] | str) -> JoinedStreams[L, R]:
        """The left stream's key: a function or a field name."""
        self._keys = [key]
        return self

    def equal_to(self, key: Callable[[R], Any] | str) -> JoinedStreams[L, R]:
        """The right stream's key: a function or a field name."""
        if len(self._keys) != 1:
            raise GraphError("call where(left_key) before equal_to(right_key)")
        self._keys.append(key)
        return self

    def window(self, window: Tumbling | Sliding) -> WindowJoined[L, R]:
        """Join within each window of `window` (`Tumbling` or `Sliding`)."""
        if len(self._keys) != 2:
            raise GraphError("a window join needs where(left_key).equal_to(right_key) before window(...)")
        if not isinstance(window, (Tumbling, Sliding)):
            raise TypeError(f"a window join takes a Tumbling or Sliding window, got {window!r}")
        return WindowJoined(self._left.key_by(self._keys[0]), self._right.key_by(self._keys[1]), window)


class WindowJoined(_Terminal[L, R]):
    """A window join: set `allowed_lateness` if wanted, end it with `apply` or `process`."""

    _kind = "window_join"

    def __init__(self, left: KeyedStream[Any, L], right: KeyedStream[Any, R], window: Tumbling | Sliding) -> None:
        self._left, self._right = left, right
        self._window = window
        self._lateness = 0.0

    def allowed_lateness(self, lateness: Duration) -> WindowJoined[L, R]:
        """Keep windows open this long after their end (inner joins): a late record joins the
        records already there, and only its new pairs are emitted."""
        self._lateness = seconds(lateness, "lateness")
        return self

    def _spec(self, name: str, output: JoinOutput, policy: Any) -> WindowJoinSpec:
        if output.how is not JoinType.INNER and self._lateness:
            raise GraphError(f"a {output.how.value} window join takes no allowed lateness (inner joins do): a late "
                             "right record could not change what was emitted for the left records of its window")
        left, right = self._left, self._right
        sides = (JoinInput(left._key, _event_time(left, "a window join")),  # type: ignore[attr-defined]
                 JoinInput(right._key, _event_time(right, "a window join")))  # type: ignore[attr-defined]
        return WindowJoinSpec(name, name, *sides, self._window, self._lateness, output=output, on_error=policy)


class TemporalJoin(_Terminal[L, R], Generic[K, L, R]):
    """`stream.temporal_join(table)`: end it with `apply` or `process`."""

    _kind = "temporal_join"

    def __init__(self, left: KeyedStream[K, L], right: KeyedStream[K, R], as_of: str) -> None:
        self._left = _keyed(left, "temporal_join")
        self._right = _keyed(right, "temporal_join")
        if left._env is not right._env:
            raise ValueError("both streams must belong to the same environment")
        self._mode = TemporalMode(check_choice("as_of", as_of, tuple(m.value for m in TemporalMode)))

    def _spec(self, name: str, output: JoinOutput, policy: Any) -> TemporalJoinSpec:
        required = self._mode is TemporalMode.EVENT_TIME
        left, right = self._left, self._right
        sides = (JoinInput(left._key, _event_time(left, "an event-time temporal join", required)),  # type: ignore
                 JoinInput(right._key, _event_time(right, "an event-time temporal join", required)))  # type: ignore
        return TemporalJoinSpec(name, name, *sides, self._mode, output=output, on_error=policy)


__all__ = ["IntervalJoin", "IntervalJoined", "JoinResults", "JoinedStreams", "TemporalJoin", "WindowJoined"]
