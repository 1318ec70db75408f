"""Connected streams: two streams into one operator with two inputs, and side outputs.

`a.connect(b)` gives `ConnectedStreams`: `map(f1, f2)` and `flat_map(f1, f2)` (one function per
input), `process(CoProcessFunction)`, or, when both are keyed (`a.key_by(f).connect(b.key_by(g))`
or `a.connect(b).key_by(f, g)`), `process(KeyedCoProcessFunction)` with keyed state and timers
shared by both inputs. `a.connect(rules.broadcast(descriptor))` gives
`BroadcastConnectedStreams`: `process` with a (keyed) broadcast process function.

The operator's task aligns barriers over both inputs, takes the minimum of both watermarks and
ends when both inputs have ended (`plan.two_inputs`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from ..errors import GraphError
from ..plan.logical import LogicalEdge
from ..plan.side_outputs import RESERVED_PREFIX
from ..plan.specs import KeySelector, SideOutputSpec
from ..plan.two_inputs import BroadcastProcessSpec, CoProcessSpec, KeyedCoProcessSpec
from ..validation import check_callable, check_has_methods
from .checks import OnErrorChoice, on_error_policy
from .co_functions import CoProcessFunction, OutputTag
from .stream import DataStream

if TYPE_CHECKING:
    from .broadcast import BroadcastStream
    from .co_functions import (
        BroadcastProcessFunction,
        KeyedBroadcastProcessFunction,
        KeyedCoProcessFunction,
    )
    from .co_functions import (
        CoProcessFunction as _CoProcess,
    )

T1 = TypeVar("T1")  # the first input's records
T2 = TypeVar("T2")  # the second input's records
R = TypeVar("R")  # what the operator emits
K = TypeVar("K")  # a key


def connect(first: DataStream[Any], other: Any) -> ConnectedStreams[Any, Any] | BroadcastConnectedStreams[Any, Any]:
    """`first.connect(other)`."""
    from .broadcast import BroadcastStream

    if isinstance(other, BroadcastStream):
        _same_env(first, other.stream)
        return BroadcastConnectedStreams(first, other)
    if not isinstance(other, DataStream):
        raise TypeError(f"connect takes a DataStream or a BroadcastStream, got {other!r} ({type(other).__name__})")
    _same_env(first, other)
    return ConnectedStreams(first, other)


def _same_env(a: DataStream[Any], b: DataStream[Any]) -> None:
    if a._env is not b._env:
        raise ValueError("both streams must belong to the same environment")


def _key(stream: DataStream[Any]) -> KeySelector | None:
    from .keyed import KeyedStream

    return stream._key if isinstance(stream, KeyedStream) else None


def add_two_input(first: DataStream[Any], second: DataStream[Any], spec: Any) -> int:
    """Add a two-input operator node fed by `first` (input 0) and `second` (input 1)."""
    return first._env._builder.add_spec(spec, LogicalEdge(first._node_id, first._partitioning),
                                        LogicalEdge(second._node_id, second._partitioning, input=1))


class ConnectedStreams(Generic[T1, T2]):
    """Two streams that one operator will read, each as one of its inputs."""

    def __init__(self, first: DataStream[T1], second: DataStream[T2]) -> None:
        self.first = first
        self.second = second

    def key_by(self, key1: Callable[[T1], K] | str, key2: Callable[[T2], K] | str) -> ConnectedStreams[T1, T2]:
        """Key both inputs: the first by `key1`, the second by `key2` (equal keys meet)."""
        return ConnectedStreams(self.first.key_by(key1), self.second.key_by(key2))

    @property
    def is_keyed(self) -> bool:
        return _key(self.first) is not None and _key(self.second) is not None

    def map(self, fn1: Callable[[T1], R], fn2: Callable[[T2], R], *, name: str | None = None,
            on_error: OnErrorChoice = "fail") -> DataStream[R]:
        """Emit `fn1(record)` for every record of the first input, `fn2(record)` of the second."""
        check_callable("fn1", fn1)
        check_callable("fn2", fn2)
        return self._co(_CoMap(fn1, fn2), "co_map", name, on_error)

    def flat_map(self, fn1: Callable[[T1], Iterable[R]], fn2: Callable[[T2], Iterable[R]], *,
                 name: str | None = None, on_error: OnErrorChoice = "fail") -> DataStream[R]:
        """Emit every record of `fn1(record)` for the first input, of `fn2(record)` for the second."""
        check_callable("fn1", fn1)
        check_callable("fn2", fn2)
        return self._co(_CoFlatMap(fn1, fn2), "co_flat_map", name, on_error)

    def process(self, function: _CoProcess[T1, T2, R] | KeyedCoProcessFunction[Any, T1, T2, R], *,
                name: str | None = None, on_error: OnErrorChoice = "fail") -> DataStream[R]:
        """Run a `CoProcessFunction`, or on two keyed inputs a `KeyedCoProcessFunction` (keyed
        state and timers shared by both inputs). `on_error`: what happens to a record (or a timer)
        the function fails on (see `DataStream.map`)."""
        from .co_functions import KeyedCoProcessFunction

        check_has_methods("function", function, "CoProcessFunction", ("process_element1", "process_element2"))
        if not self.is_keyed:
            if isinstance(function, KeyedCoProcessFunction):
                raise GraphError("a KeyedCoProcessFunction needs both inputs keyed: "
                                 "a.key_by(f).connect(b.key_by(g)) or a.connect(b).key_by(f, g)")
            return self._co(function, "co_process", name, on_error)
        env = self.first._env
        policy = on_error_policy(env, on_error, "process")
        op_name = env._builder.name(name, "co_process")
        keys = (_key(self.first), _key(self.second))
        spec = KeyedCoProcessSpec(op_name, op_name, keys, function, policy)  # type: ignore[arg-type]
        return DataStream[R](env, add_two_input(self.first, self.second, spec))

    def _co(self, function: Any, base: str, name: str | None, on_error: OnErrorChoice) -> DataStream[Any]:
        env = self.first._env
        policy = on_error_policy(env, on_error, base)
        op_name = env._builder.name(name, base)
        spec = CoProcessSpec(op_name, op_name, function, policy)
        return DataStream[Any](env, add_two_input(self.first, self.second, spec))


class BroadcastConnectedStreams(Generic[T1, T2]):
    """A stream and a broadcast stream, for a (keyed) broadcast process function."""

    def __init__(self, stream: DataStream[T1], broadcast: BroadcastStream[T2]) -> None:
        self.stream = stream
        self.broadcast = broadcast

    def process(self, function: BroadcastProcessFunction[T1, T2, R] | KeyedBroadcastProcessFunction[Any, T1, T2, R],
                *, name: str | None = None, on_error: OnErrorChoice = "fail") -> DataStream[R]:
        """Run a `BroadcastProcessFunction`, or on a keyed stream a `KeyedBroadcastProcessFunction`.

        `on_error`: what happens to a record the function fails on (either input's)."""
        from .co_functions import BroadcastProcessFunction, KeyedBroadcastProcessFunction

        check_has_methods("function", function, "BroadcastProcessFunction",
                          ("process_element", "process_broadcast_element"))
        key = _key(self.stream)
        if key is not None and isinstance(function, BroadcastProcessFunction):
            raise GraphError("the stream is keyed: use a KeyedBroadcastProcessFunction (or connect the stream "
                             "before key_by)")
        if key is None and isinstance(function, KeyedBroadcastProcessFunction):
            raise GraphError("a KeyedBroadcastProcessFunction needs a keyed stream: "
                             "stream.key_by(f).connect(rules.broadcast(descriptor))")
        env = self.stream._env
        policy = on_error_policy(env, on_error, "process")
        op_name = env._builder.name(name, "broadcast_process")
        spec = BroadcastProcessSpec(op_name, op_name, key, function, self.broadcast.names, policy)
        return DataStream[R](env, add_two_input(self.stream, self.broadcast.partitioned, spec))


class _CoMap(CoProcessFunction[Any, Any, Any]):
    def __init__(self, fn1: Callable[[Any], Any], fn2: Callable[[Any], Any]) -> None:
        self.fn1, self.fn2 = fn1, fn2

    def process_element1(self, value: Any, ctx: Any) -> Iterable[Any]:
        return (self.fn1(value),)

    def process_element2(self, value: Any, ctx: Any) -> Iterable[Any]:
        return (self.fn2(value),)


class _CoFlatMap(CoProcessFunction[Any, Any, Any]):
    def __init__(self, fn1: Callable[[Any], Iterable[Any]], fn2: Callable[[Any], Iterable[Any]]) -> None:
        self.fn1, self.fn2 = fn1, fn2

    def process_element1(self, value: Any, ctx: Any) -> Iterable[Any]:
        return self.fn1(value)

    def process_element2(self, value: Any, ctx: Any) -> Iterable[Any]:
        return self.fn2(value)


def side_output(stream: DataStream[Any], node_id: int, tag: Any, name: str | None, *, reserved: bool = False
                ) -> DataStream[Any]:
    """The side output `tag` of operator `node_id`, as a stream of its own (see
    `DataStream.side_output`); `reserved`: a system tag (a join's late records)."""
    tag_name = tag if reserved else _tag_name(tag)
    builder = stream._env._builder
    spec: Any = builder.spec(node_id)
    if not hasattr(spec, "side_outputs"):
        raise GraphError(
            f"operator {spec.name!r} runs no function that sends side outputs: side_output applies to "
            "process functions (keyed, co-, broadcast, window) and joins"
        )
    if tag_name not in spec.side_outputs:
        builder.update(node_id, side_outputs=(*spec.side_outputs, tag_name))
    base = tag_name.strip("_").replace("_", "-") if reserved else tag_name
    split = builder.add(
        lambda n: SideOutputSpec(n, n, tag_name), f"{spec.name}-{base}", name, LogicalEdge(node_id, None)
    )
    builder.set_parallelism(split, builder.parallelism(node_id))  # equal: a forward edge, chained to the operator
    return DataStream[Any](stream._env, split)


def _tag_name(tag: Any) -> str:
    if isinstance(tag, OutputTag):
        return tag.name
    if isinstance(tag, str) and tag and not tag.startswith(RESERVED_PREFIX):
        return tag
    raise TypeError(f"tag must be an OutputTag (or its name), got {tag!r}")


__all__ = ["BroadcastConnectedStreams", "ConnectedStreams", "add_two_input", "connect", "side_output"]
