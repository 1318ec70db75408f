"""`DataStream.flat_map`: zero or more output records per input record."""

from __future__ import annotations

from epochal.connectors import TextFileSource
from epochal.testing import CollectSink, ListSource


def test_flat_map_splits_lines_into_words_in_order(make_env):
    env = make_env(parallelism=1)
    sink = CollectSink()
    env.from_source(ListSource(["a b", "c", "d e f"])).flat_map(str.split).sink_to(sink)
    env.execute("flat-map")
    assert sink.committed() == ["a", "b", "c", "d", "e", "f"]


def test_flat_map_accepts_generators_and_empty_results(make_env):
    def repeat(n):
        for i in range(n):
            yield (n, i)

    env = make_env(parallelism=1)
    sink = CollectSink()
    env.from_source(ListSource([0, 2, 0, 1])).flat_map(repeat).sink_to(sink)
    env.execute("flat-map-gen")
    assert sink.committed() == [(2, 0), (2, 1), (1, 0)]


def test_flat_map_in_parallel(make_env):
    env = make_env(parallelism=2)
    sink = CollectSink()
    items = list(range(40))
    env.from_source(ListSource(items, splits=2, batch_size=3)).flat_map(lambda x: [x] * (x % 4)).sink_to(sink)
    result = env.execute("flat-map-parallel")
    assert sorted(sink.committed()) == sorted(x for x in items for _ in range(x % 4))
    assert result.operator("flat_map").records_in == 40
    assert result.operator("flat_map").records_out == sum(x % 4 for x in items)


def test_flat_map_over_text_file_lines(make_env, tmp_path):
    (tmp_path / "one.txt").write_text("to be or\nnot to be\n")
    (tmp_path / "two.txt").write_text("that is\r\nthe question")
    env = make_env(parallelism=2)
    sink = CollectSink()
    env.from_source(TextFileSource(str(tmp_path))).flat_map(str.split).sink_to(sink)
    env.execute("flat-map-text")
    assert sorted(sink.committed()) == sorted("to be or not to be that is the question".split())
