"""`KeyedStream.aggregate`: an `AggregateFunction` folded per key, `(key, result)` per record."""

from __future__ import annotations

import pytest

from epochal import AggregateFunction
from epochal.testing import CollectSink, ListSource


class Average(AggregateFunction):
    def create_accumulator(self):
        return (0, 0)

    def add(self, value, acc):
        return (acc[0] + value[1], acc[1] + 1)

    def get_result(self, acc):
        return acc[0] / acc[1]


class Collect(AggregateFunction):
    """Accumulates into a list, returning a new one each time."""

    def create_accumulator(self):
        return []

    def add(self, value, acc):
        return acc + [value]

    def get_result(self, acc):
        return tuple(acc)


def test_aggregate_emits_key_and_running_result(make_env):
    env = make_env(parallelism=1)
    sink = CollectSink()
    items = [("a", 2), ("b", 10), ("a", 4), ("a", 9)]
    env.from_source(ListSource(items)).key_by(lambda r: r[0]).aggregate(Average()).sink_to(sink)
    env.execute("aggregate")
    assert sink.committed() == [("a", 2.0), ("b", 10.0), ("a", 3.0), ("a", 5.0)]


@pytest.mark.parametrize("parallelism", [1, 2, 4])
def test_aggregate_accumulators_are_per_key(make_env, parallelism):
    items = [i % 6 for i in range(36)]
    env = make_env(parallelism=parallelism)
    sink = CollectSink()
    env.from_source(ListSource(items, batch_size=5)).key_by(lambda x: x % 3).aggregate(Collect()).sink_to(sink)
    env.execute("aggregate-per-key")
    finals: dict = {}
    for key, acc in sink.committed():
        if len(acc) > len(finals.get(key, ())):
            finals[key] = acc
    assert finals == {k: tuple(x for x in items if x % 3 == k) for k in range(3)}
    assert len(sink.committed()) == len(items)


def test_aggregate_names(make_env):
    env = make_env(parallelism=1)
    keyed = env.from_source(ListSource([("a", 1)])).key_by(lambda r: r[0])
    first = keyed.aggregate(Average())
    second = keyed.aggregate(Average())
    named = keyed.aggregate(Average(), name="avg")
    for s in (first, second, named):
        s.sink_to(CollectSink())
    assert (first.name, second.name, named.name) == ("aggregate", "aggregate_2", "avg")
    env.execute("aggregate-names")


def test_the_users_function_object_is_not_shared_with_the_job(make_env):
    class Counting(Average):
        def __init__(self):
            self.calls = 0

        def add(self, value, acc):
            self.calls += 1
            return super().add(value, acc)

    fn = Counting()
    env = make_env(parallelism=2)
    sink = CollectSink()
    env.from_source(ListSource([("a", 1), ("b", 2), ("a", 3)])).key_by(lambda r: r[0]).aggregate(fn).sink_to(sink)
    env.execute("aggregate-copy")
    assert sorted(sink.committed()) == [("a", 1.0), ("a", 2.0), ("b", 2.0)]
    assert fn.calls == 0
