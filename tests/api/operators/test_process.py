"""`KeyedStream.process`: keyed state (value, list, map) and processing-time timers."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

from epochal import KeyedProcessFunction, StreamEnvironment
from epochal.testing import CollectSink, ListSource

if TYPE_CHECKING:
    from api.conftest import MakeEnv, RunVirtual


class RunningSum(KeyedProcessFunction):
    def open(self, ctx: Any) -> None:
        self.total = ctx.value_state("total", default=0)

    def process_element(self, value: Any, ctx: Any) -> Any:
        total = self.total.value() + value[1]
        self.total.update(total)
        yield (ctx.key, total)


class History(KeyedProcessFunction):
    def open(self, ctx: Any) -> None:
        self.history = ctx.list_state("history")

    def process_element(self, value: Any, ctx: Any) -> Any:
        before = self.history.get()
        self.history.add(value[1])
        if value[1] == "reset":
            self.history.clear()
        return [(ctx.key, tuple(before), tuple(self.history.get()))]


class Tally(KeyedProcessFunction):
    """Per key, counts each item in a MapState; "-item" removes it."""

    def open(self, ctx: Any) -> None:
        self.tally = ctx.map_state("tally")

    def process_element(self, value: Any, ctx: Any) -> Any:
        key, item = value
        if item.startswith("-"):
            self.tally.remove(item[1:])
        else:
            self.tally.put(item, self.tally.get(item, 0) + 1)
        yield (ctx.key, dict(sorted(self.tally.items())), self.tally.contains("x"), self.tally.is_empty())


def _run(
    make_env: MakeEnv, fn: KeyedProcessFunction, items: list[Any], parallelism: int = 2, **source: Any
) -> list[Any]:
    env = make_env(parallelism=parallelism)
    sink = CollectSink()
    env.from_source(ListSource(items, **source)).key_by(lambda r: r[0]).process(fn).sink_to(sink)
    env.execute("process")
    return sink.committed()


def _per_key(records: list[Any]) -> dict[Any, list[Any]]:
    out: dict[Any, list[Any]] = {}
    for r in records:
        out.setdefault(r[0], []).append(r[1:] if len(r) > 2 else r[1])
    return out


@pytest.mark.parametrize("parallelism", [1, 2, 3])
def test_value_state_is_per_key(make_env: MakeEnv, parallelism: int) -> None:
    items = [(k, i) for i in range(10) for k in "abcd"]
    got = _per_key(_run(make_env, RunningSum(), items, parallelism=parallelism, batch_size=3))
    assert got == {k: [sum(range(i + 1)) for i in range(10)] for k in "abcd"}


def test_value_state_default_and_clear(make_env: MakeEnv) -> None:
    class CountThenClear(KeyedProcessFunction):
        def open(self, ctx: Any) -> None:
            self.n = ctx.value_state("n", default=100)

        def process_element(self, value: Any, ctx: Any) -> Any:
            if value[1] == "clear":
                self.n.clear()
                return [(ctx.key, self.n.value())]
            self.n.update(self.n.value() + 1)
            return [(ctx.key, self.n.value())]

    items = [("a", "+"), ("b", "+"), ("a", "+"), ("a", "clear"), ("a", "+")]
    got = _run(make_env, CountThenClear(), items, parallelism=1)
    assert got == [("a", 101), ("b", 101), ("a", 102), ("a", 100), ("a", 101)]


def test_list_state_is_per_key(make_env: MakeEnv) -> None:
    items = [("a", 1), ("b", 2), ("a", 3), ("b", 4), ("a", "reset"), ("a", 5)]
    got = _run(make_env, History(), items, parallelism=2)
    assert _per_key(got) == {
        "a": [((), (1,)), ((1,), (1, 3)), ((1, 3), ()), ((), (5,))],
        "b": [((), (2,)), ((2,), (2, 4))],
    }


def test_list_state_get_returns_a_copy(make_env: MakeEnv) -> None:
    class Mutate(KeyedProcessFunction):
        def open(self, ctx: Any) -> None:
            self.items = ctx.list_state("items")

        def process_element(self, value: Any, ctx: Any) -> Any:
            self.items.get().append("intruder")  # must not change the state
            self.items.add_all([value[1], value[1]])
            yield (ctx.key, tuple(self.items.get()))

    got = _run(make_env, Mutate(), [("a", 1), ("a", 2)], parallelism=1)
    assert got == [("a", (1, 1)), ("a", (1, 1, 2, 2))]


def test_map_state_is_per_key(make_env: MakeEnv) -> None:
    items = [("a", "x"), ("b", "y"), ("a", "x"), ("a", "z"), ("b", "-y"), ("a", "-x")]
    got = _run(make_env, Tally(), items, parallelism=2)
    assert _per_key(got) == {
        "a": [
            ({"x": 1}, True, False), ({"x": 2}, True, False), ({"x": 2, "z": 1}, True, False), ({"z": 1}, False, False)
        ],
        "b": [({"y": 1}, False, False), ({}, False, True)],
    }


def test_several_states_in_one_function(make_env: MakeEnv) -> None:
    class Both(KeyedProcessFunction):
        def open(self, ctx: Any) -> None:
            self.count = ctx.value_state("count", default=0)
            self.seen = ctx.map_state("seen")

        def process_element(self, value: Any, ctx: Any) -> Any:
            self.count.update(self.count.value() + 1)
            self.seen.put(value[1], True)
            yield (ctx.key, self.count.value(), sorted(self.seen.keys()))

    got = _run(make_env, Both(), [("a", 1), ("b", 1), ("a", 2), ("a", 1)], parallelism=1)
    assert got == [("a", 1, [1]), ("b", 1, [1]), ("a", 2, [1, 2]), ("a", 3, [1, 2])]


def test_ctx_key_is_the_selected_key(make_env: MakeEnv) -> None:
    class EchoKey(KeyedProcessFunction):
        def process_element(self, value: Any, ctx: Any) -> Any:
            yield (ctx.key, value)

    got = _run(make_env, EchoKey(), [("a", 1), (("t", 1), 2), (3, 3)], parallelism=2)
    assert sorted(got, key=repr) == sorted([("a", ("a", 1)), (("t", 1), (("t", 1), 2)), (3, (3, 3))], key=repr)


def test_returning_none_emits_nothing(make_env: MakeEnv) -> None:
    class Silent(KeyedProcessFunction):
        def process_element(self, value: Any, ctx: Any) -> Any:
            return None

    assert _run(make_env, Silent(), [("a", 1), ("b", 2)]) == []


def test_the_function_object_is_copied_per_subtask(make_env: MakeEnv) -> None:
    class Remember(KeyedProcessFunction):
        def __init__(self) -> None:
            self.seen: list[Any] = []

        def process_element(self, value: Any, ctx: Any) -> Any:
            self.seen.append(value)
            yield value

    fn = Remember()
    got = _run(make_env, fn, [("a", 1), ("b", 2)], parallelism=2)
    assert sorted(got) == [("a", 1), ("b", 2)]
    assert fn.seen == []


def test_a_mutable_default_is_not_shared_between_keys(make_env: MakeEnv) -> None:
    class Append(KeyedProcessFunction):
        def open(self, ctx: Any) -> None:
            self.items = ctx.value_state("items", default=[])

        def process_element(self, value: Any, ctx: Any) -> Any:
            items = self.items.value()
            items.append(value[1])
            self.items.update(items)
            yield (ctx.key, tuple(items))

    got = _run(make_env, Append(), [("a", 1), ("b", 2), ("c", 3)], parallelism=1)
    assert got == [("a", (1,)), ("b", (2,)), ("c", (3,))]


# -- processing-time timers ------------------------------------------------------------------------


class TimerOnFirst(KeyedProcessFunction):
    """On the first record of a key, registers a timer `delay` from now; the timer emits once."""

    def __init__(self, delay: float) -> None:
        self.delay = delay

    def open(self, ctx: Any) -> None:
        self.registered = ctx.value_state("registered")
        self.seen = ctx.value_state("seen", default=0)

    def process_element(self, value: Any, ctx: Any) -> Any:
        self.seen.update(self.seen.value() + 1)
        if self.registered.value() is None:
            ts = ctx.current_processing_time() + self.delay
            self.registered.update(ts)
            ctx.register_processing_time_timer(ts)
        return None

    def on_timer(self, timestamp: float, ctx: Any) -> Any:
        assert timestamp == self.registered.value()
        assert ctx.current_processing_time() >= timestamp
        yield ("timer", ctx.key, self.seen.value() > 0)


def _slow_keyed(
    make_env: MakeEnv, fn: KeyedProcessFunction, keys: str | list[str], rounds: int, parallelism: int = 2
) -> tuple[StreamEnvironment, CollectSink]:
    """A keyed job whose source hands out one record per batch, so time passes while it reads."""
    env = make_env(parallelism=parallelism)
    sink = CollectSink()
    items = [(k, i) for i in range(rounds) for k in keys]
    env.from_source(ListSource(items, splits=2, batch_size=1)).key_by(lambda r: r[0]).process(fn).sink_to(sink)
    return env, sink


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_timers_fire_once_per_key_with_ctx_key_set(make_env: MakeEnv, run_virtual: RunVirtual, seed: int) -> None:
    env, sink = _slow_keyed(make_env, TimerOnFirst(delay=0.02), "abcd", rounds=100)
    run_virtual(env, seed=seed)
    assert sorted(sink.committed()) == [("timer", k, True) for k in "abcd"]


def test_timer_state_is_that_of_the_timers_key(make_env: MakeEnv, run_virtual: RunVirtual) -> None:
    class Flush(KeyedProcessFunction):
        """Buffers a key's records in ListState; a timer flushes them as one record."""

        def open(self, ctx: Any) -> None:
            self.buffer = ctx.list_state("buffer")

        def process_element(self, value: Any, ctx: Any) -> Any:
            if not self.buffer.get():
                ctx.register_processing_time_timer(ctx.current_processing_time() + 0.005)
            self.buffer.add(value[1])

        def on_timer(self, timestamp: float, ctx: Any) -> Any:
            values = self.buffer.get()
            self.buffer.clear()
            yield (ctx.key, tuple(values))

    env, sink = _slow_keyed(make_env, Flush(), "xyz", rounds=60)
    run_virtual(env, seed=3)
    flushed: dict[str, list[int]] = {}
    for key, values in sink.committed():
        flushed.setdefault(key, []).extend(values)
    # every record flushed exactly once, under its own key; records after the last timer stay buffered
    assert set(flushed) == set("xyz")
    for values in flushed.values():
        assert len(values) == len(set(values)) > 1
        assert set(values) <= set(range(60))
    assert len([r for r in sink.committed() if r[0] == "x"]) > 1  # the timer fired repeatedly


def test_a_deleted_timer_does_not_fire(make_env: MakeEnv, run_virtual: RunVirtual) -> None:
    class RegisterThenDelete(KeyedProcessFunction):
        def open(self, ctx: Any) -> None:
            self.ts = ctx.value_state("ts")

        def process_element(self, value: Any, ctx: Any) -> Any:
            if self.ts.value() is None:
                ts = ctx.current_processing_time() + 0.01
                self.ts.update(ts)
                ctx.register_processing_time_timer(ts)
                if ctx.key == "drop":
                    ctx.delete_processing_time_timer(ts)

        def on_timer(self, timestamp: float, ctx: Any) -> Any:
            yield ctx.key

    env, sink = _slow_keyed(make_env, RegisterThenDelete(), ["keep", "drop"], rounds=100)
    run_virtual(env, seed=0)
    assert sink.committed() == ["keep"]


def test_timers_of_the_same_time_for_one_key_fire_once(make_env: MakeEnv, run_virtual: RunVirtual) -> None:
    class SameTime(KeyedProcessFunction):
        def process_element(self, value: Any, ctx: Any) -> Any:
            if ctx.current_processing_time() < 0.05:  # every early record asks for the same timer
                ctx.register_processing_time_timer(0.05)

        def on_timer(self, timestamp: float, ctx: Any) -> Any:
            yield (ctx.key, timestamp)

    env, sink = _slow_keyed(make_env, SameTime(), "ab", rounds=150)
    run_virtual(env, seed=0)
    assert sorted(sink.committed()) == [("a", 0.05), ("b", 0.05)]
