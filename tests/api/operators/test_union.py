"""`DataStream.union`: merge streams; records keep their per-input order."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from epochal.testing import CollectSink, ListSource

if TYPE_CHECKING:
    from api.conftest import MakeEnv


def test_union_of_two_sources(make_env: MakeEnv) -> None:
    env = make_env(parallelism=2)
    sink = CollectSink()
    a = env.from_source(ListSource(list(range(30)), splits=2))
    b = env.from_source(ListSource([f"b{i}" for i in range(20)], splits=2))
    a.union(b).sink_to(sink)
    env.execute("union")
    assert sorted(sink.committed(), key=repr) == sorted(list(range(30)) + [f"b{i}" for i in range(20)], key=repr)


def test_union_of_three_keeps_each_inputs_order(make_env: MakeEnv) -> None:
    env = make_env(parallelism=1)
    sink = CollectSink()
    streams = [env.from_source(ListSource([(tag, i) for i in range(40)], batch_size=3)) for tag in "xyz"]
    streams[0].union(streams[1], streams[2]).sink_to(sink)
    env.execute("union-order")
    out = sink.committed()
    assert len(out) == 120
    for tag in "xyz":
        assert [i for t, i in out if t == tag] == list(range(40))


def test_union_of_transformed_streams_with_different_parallelism(make_env: MakeEnv) -> None:
    env = make_env(parallelism=2)
    sink = CollectSink()
    src = env.from_source(ListSource(list(range(50)), splits=3))
    evens = src.filter(lambda x: x % 2 == 0).map(lambda x: ("even", x)).set_parallelism(3)
    odds = src.filter(lambda x: x % 2 == 1).map(lambda x: ("odd", x)).set_parallelism(1)
    evens.union(odds).sink_to(sink)
    parallelism = {v.name: v.parallelism for v in env.job_graph().vertices}
    assert (parallelism["map"], parallelism["map_2"], parallelism["union -> sink"]) == (3, 1, 2)
    env.execute("union-parallelism")
    assert sorted(sink.committed()) == sorted(("even" if x % 2 == 0 else "odd", x) for x in range(50))


def test_union_with_itself_duplicates_records(make_env: MakeEnv) -> None:
    env = make_env(parallelism=2)
    sink = CollectSink()
    src = env.from_source(ListSource([1, 2, 3]))
    src.union(src).sink_to(sink)
    env.execute("union-self")
    assert sorted(sink.committed()) == [1, 1, 2, 2, 3, 3]


def test_union_then_keyed_count(make_env: MakeEnv) -> None:
    env = make_env(parallelism=2)
    sink = CollectSink()
    a = env.from_source(ListSource(list("abab")))
    b = env.from_source(ListSource(list("bcb")))
    a.union(b).key_by(lambda w: w).count().sink_to(sink)
    env.execute("union-count")
    finals: dict[str, int] = {}
    for key, n in sink.committed():
        finals[key] = max(finals.get(key, 0), n)
    assert finals == {"a": 2, "b": 4, "c": 1}


def test_union_is_a_vertex_of_its_own(make_env: MakeEnv) -> None:
    env = make_env(parallelism=2)
    a = env.from_source(ListSource([1]))
    b = env.from_source(ListSource([2]), name="other")
    a.union(b, name="merge").map(str).sink_to(CollectSink())
    vertices = {v.name: v for v in env.job_graph().vertices}
    assert set(vertices) == {"source", "other", "merge -> map -> sink"}
    merge = vertices["merge -> map -> sink"]
    assert len(env.job_graph().inputs_of(merge.id)) == 2


def test_union_of_streams_of_different_environments_is_refused(make_env: MakeEnv) -> None:
    a = make_env().from_source(ListSource([1]))
    b = make_env().from_source(ListSource([2]))
    with pytest.raises(ValueError, match="different environments"):
        a.union(b)
