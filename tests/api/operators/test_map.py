"""`DataStream.map`: one output record per input record."""

from __future__ import annotations

import pyarrow as pa

from epochal.testing import CollectSink, ListSource


def test_map_applies_fn_to_every_record_in_order(make_env):
    env = make_env(parallelism=1)
    sink = CollectSink()
    env.from_source(ListSource([1, 2, 3, 4])).map(lambda x: x * 10).sink_to(sink)
    env.execute("map")
    assert sink.committed() == [10, 20, 30, 40]


def test_map_in_parallel_emits_each_result_once(make_env):
    env = make_env(parallelism=2)
    sink = CollectSink()
    items = list(range(100))
    env.from_source(ListSource(items, splits=4, batch_size=7)).map(lambda x: (x, x * x)).sink_to(sink)
    env.execute("map-parallel")
    assert sorted(sink.committed()) == [(x, x * x) for x in items]


def test_map_keeps_none_results_as_records(make_env):
    env = make_env(parallelism=1)
    sink = CollectSink()
    env.from_source(ListSource(["a", "b"])).map(lambda _: None).sink_to(sink)
    env.execute("map-none")
    assert sink.committed() == [None, None]


def test_map_sees_arrow_rows_as_tuples_or_bare_values(make_env):
    env = make_env(parallelism=1)
    pairs, singles = CollectSink(), CollectSink()
    src = env.from_source(ListSource([("a", 1), ("b", 2)]))
    two_columns = src.map_batches(lambda b: b.rename_columns(["k", "v"]))
    two_columns.map(lambda row: row).sink_to(pairs)
    two_columns.map_batches(lambda b: b.select(["v"])).map(lambda v: v + 100).sink_to(singles)
    env.execute("map-arrow")
    assert pairs.committed() == [("a", 1), ("b", 2)]
    assert singles.committed() == [101, 102]


def test_map_output_is_a_list_batch_even_from_arrow_input(make_env, probe_sink):
    env = make_env(parallelism=1)
    sink = probe_sink()
    (
        env.from_source(ListSource([1, 2, 3]))
        .map_batches(lambda b: b)
        .map(lambda v: v * 2)
        .sink_to(sink)
    )
    env.execute("map-shape")
    assert sink.values() == [2, 4, 6]
    assert all(not isinstance(batch, pa.RecordBatch) for _, batch in sink.batches)


def test_map_names_and_metrics(make_env):
    env = make_env(parallelism=2)
    src = env.from_source(ListSource(list(range(10)), splits=2))
    first = src.map(str)
    second = first.map(len)
    named = second.map(lambda n: n, name="identity")
    named.sink_to(CollectSink())
    assert (first.name, second.name, named.name) == ("map", "map_2", "identity")
    result = env.execute("map-metrics")
    assert result.operator("identity").records_in == 10
    assert result.operator("identity").records_out == 10
    assert result.operator("map").records_in == 10
