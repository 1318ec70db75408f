"""`DataStream.filter`: keep the records a predicate accepts."""

from __future__ import annotations

from epochal.connectors import TextFileSource
from epochal.testing import CollectSink, ListSource


def test_filter_keeps_matching_records_in_order(make_env):
    env = make_env(parallelism=1)
    sink = CollectSink()
    env.from_source(ListSource(list(range(10)))).filter(lambda x: x % 3 == 0).sink_to(sink)
    env.execute("filter")
    assert sink.committed() == [0, 3, 6, 9]


def test_filter_uses_truthiness_and_emits_the_record_not_the_predicate(make_env):
    env = make_env(parallelism=1)
    sink = CollectSink()
    items = [0, 1, "", "x", None, [], [0], 2.5]
    env.from_source(ListSource(items)).filter(lambda x: x).sink_to(sink)
    env.execute("filter-truthy")
    assert sink.committed() == [1, "x", [0], 2.5]


def test_filter_rejecting_everything_emits_nothing(make_env):
    env = make_env(parallelism=2)
    sink = CollectSink()
    env.from_source(ListSource(list(range(50)), splits=2)).filter(lambda _: False).sink_to(sink)
    result = env.execute("filter-none")
    assert sink.committed() == []
    assert result.operator("filter").records_in == 50
    assert result.operator("filter").records_out == 0


def test_filter_in_parallel(make_env):
    env = make_env(parallelism=2)
    sink = CollectSink()
    env.from_source(ListSource(list(range(200)), splits=3, batch_size=9)).filter(lambda x: x % 2).sink_to(sink)
    env.execute("filter-parallel")
    assert sorted(sink.committed()) == list(range(1, 200, 2))


def test_filter_on_text_lines(make_env, tmp_path):
    (tmp_path / "a.txt").write_text("keep me\ndrop\nkeep too\n\n")
    env = make_env(parallelism=1)
    sink = CollectSink()
    env.from_source(TextFileSource(str(tmp_path))).filter(lambda line: line.startswith("keep")).sink_to(sink)
    env.execute("filter-text")
    assert sink.committed() == ["keep me", "keep too"]
