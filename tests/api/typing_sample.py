"""A program that mypy checks, never runs (tests/api/test_typing.py).

`# T: <type>` says what `reveal_type` on that line must show (builtins spelt short: `int`,
`str`; streams by class name); `# E: <code>` says mypy must report an error with that code on
that line. A line with neither must check clean.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, reveal_type

from epochal import (
    AggregateFunction,
    BroadcastProcessFunction,
    KeyedCoProcessFunction,
    KeyedProcessFunction,
    MapFunction,
    MapStateDescriptor,
    ProcessContext,
    ProcessJoinFunction,
    StreamEnvironment,
)
from epochal.api.context import BroadcastSideContext, JoinContext
from epochal.testing import CollectSink, ListSource
from epochal.windows import ProcessWindowFunction, Tumbling

env = StreamEnvironment(parallelism=1, executor="inprocess")
numbers = env.from_source(ListSource([1, 2, 3]))
reveal_type(numbers)  # T: DataStream[int]
words = env.from_source(ListSource(["a", "bb"]))
reveal_type(words)  # T: DataStream[str]

# -- one input, stateless ------------------------------------------------------------------------
reveal_type(numbers.map(lambda n: str(n)))  # T: DataStream[str]
reveal_type(numbers.map(lambda n: (n, n * 2.0)))  # T: DataStream[tuple[int, float]]
reveal_type(numbers.filter(lambda n: n > 1))  # T: DataStream[int]
reveal_type(words.flat_map(lambda w: list(w)))  # T: DataStream[str]
reveal_type(numbers.union(numbers).rebalance())  # T: DataStream[int]
reveal_type(numbers.map(str).set_parallelism(2).uid("as-text"))  # T: DataStream[str]


async def look_up(n: int) -> str:
    return str(n)


reveal_type(numbers.map_async(look_up, capacity=10))  # T: DataStream[str]


class Label(MapFunction[int, str]):
    def map(self, value: int) -> str:
        return f"#{value}"


reveal_type(numbers.map(Label()))  # T: DataStream[str]
reveal_type(numbers.sink_to(CollectSink()))  # T: DataStream[Any]


def halve(loop: Any) -> Any:
    halved = loop.map(lambda n: n // 2)
    return halved.filter(lambda n: n > 0), halved


# -- keyed -----------------------------------------------------------------------------------------
by_parity = numbers.key_by(lambda n: n % 2 == 0)
reveal_type(by_parity)  # T: KeyedStream[bool, int]
reveal_type(env.from_source(ListSource([{"user": "a"}])).key_by("user"))  # T: KeyedStream[Any, dict[str, str]]
reveal_type(by_parity.count())  # T: DataStream[tuple[bool, int]]
reveal_type(by_parity.sum())  # T: DataStream[tuple[bool, Any]]
reveal_type(by_parity.mean())  # T: DataStream[tuple[bool, float]]
reveal_type(by_parity.reduce(lambda a, b: a + b))  # T: DataStream[int]


class Average(AggregateFunction[int, tuple[int, int], float]):
    def create_accumulator(self) -> tuple[int, int]:
        return (0, 0)

    def add(self, value: int, accumulator: tuple[int, int]) -> tuple[int, int]:
        return (accumulator[0] + value, accumulator[1] + 1)

    def get_result(self, accumulator: tuple[int, int]) -> float:
        return accumulator[0] / accumulator[1]


reveal_type(by_parity.aggregate(Average()))  # T: DataStream[tuple[bool, float]]


class Tally(KeyedProcessFunction[bool, int, tuple[bool, int]]):
    def open(self, ctx: ProcessContext) -> None:
        self.total = ctx.value_state("total", default=0)
        reveal_type(self.total)  # T: ValueState[int]
        reveal_type(ctx.value_state("anything"))  # T: ValueState[Any]

    def process_element(self, value: int, ctx: ProcessContext) -> Iterable[tuple[bool, int]]:
        self.total.update(self.total.value() + value)
        yield (bool(ctx.key), self.total.value())


reveal_type(by_parity.process(Tally()))  # T: DataStream[tuple[bool, int]]

# -- windows ---------------------------------------------------------------------------------------
reveal_type(by_parity.window(Tumbling(10)).count())  # T: WindowResults[tuple[bool, float, float, int]]
by_clock = by_parity.window(Tumbling(10), time="processing")
reveal_type(by_clock.reduce(max))  # T: WindowResults[tuple[bool, float, float, int]]
reveal_type(by_parity.count_window(5).aggregate(Average()))  # T: WindowResults[tuple[bool, float, float, float]]
reveal_type(by_parity.windows({"10s": Tumbling(10)}).count())  # T: WindowResults[tuple[bool, str, float, float, int]]
reveal_type(numbers.window_all(Tumbling(10)).reduce(lambda a, b: a + b))  # T: WindowResults[tuple[float, float, int]]


class Spread(ProcessWindowFunction[bool, int, int]):
    def process(self, key: bool, window: Any, records: list[int]) -> Iterable[int]:
        yield max(records) - min(records)


reveal_type(by_parity.window(Tumbling(10)).process(Spread()))  # T: WindowResults[int]

# -- two inputs ------------------------------------------------------------------------------------
reveal_type(numbers.connect(words).map(lambda n: n, len))  # T: DataStream[int]


class Match(KeyedCoProcessFunction[str, int, str, str]):
    def process_element1(self, value: int, ctx: ProcessContext) -> Iterable[str]:
        yield str(value)

    def process_element2(self, value: str, ctx: ProcessContext) -> Iterable[str]:
        yield value


reveal_type(numbers.connect(words).key_by(str, str).process(Match()))  # T: DataStream[str]
RULES = MapStateDescriptor("rules")


class Rules(BroadcastProcessFunction[int, str, float]):
    def process_element(self, value: int, ctx: Any) -> Iterable[float]:
        yield float(value)

    def process_broadcast_element(self, value: str, ctx: BroadcastSideContext) -> Iterable[float]:
        return ()


reveal_type(numbers.connect(words.broadcast(RULES)).process(Rules()))  # T: DataStream[float]
left = numbers.key_by(str)
right = words.key_by(str)
reveal_type(left.interval_join(right).between(-1, 1).apply())  # T: JoinResults[tuple[int, str]]
reveal_type(left.interval_join(right).between(-1, 1).apply(how="left"))  # T: JoinResults[tuple[int, str | None]]
reveal_type(left.interval_join(right).between(-1, 1).apply(how="semi"))  # T: JoinResults[int]
reveal_type(left.temporal_join(right).apply(lambda n, w: w * n))  # T: JoinResults[str]
joined = numbers.join(words).where(str).equal_to(str).window(Tumbling(5))
reveal_type(joined.apply(lambda n, w: (w, n)))  # T: JoinResults[tuple[str, int]]


class Delay(ProcessJoinFunction[int, str, float]):
    def process_element(self, left: int, right: str, ctx: JoinContext) -> Iterable[float]:
        yield ctx.left_timestamp


reveal_type(left.interval_join(right).between(0, 5).process(Delay()))  # T: JoinResults[float]

# -- what must not check ---------------------------------------------------------------------------
numbers.map(lambda n: n.upper())  # E: attr-defined
numbers.map(Label()).map(lambda s: s + 1)  # E: operator
words.map(Label())  # E: arg-type
numbers.union(words)  # E: arg-type
by_parity.process(Match())  # E: arg-type
by_parity.reduce(lambda a, b: str(a))  # E: return-value
by_parity.window(Tumbling(10)).process(Delay())  # E: arg-type
numbers.connect(words).map(len, len)  # E: arg-type
left.interval_join(right).between(0, 1).process(Delay()).map(lambda d: d.keys())  # E: attr-defined
