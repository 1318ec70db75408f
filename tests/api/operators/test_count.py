"""`KeyedStream.count`: a running count per key, per record or vectorized on Arrow batches.

The per-record path (a key function on Python records) and the columnar path (a column name on
Arrow batches) must emit the same `(key, count)` records, whatever the batch boundaries.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from epochal import CheckpointConfig, StreamEnvironment
from epochal.connectors import FileSink, TextFileSource, read_committed
from epochal.testing import CollectSink, ListSource
from expectations import running_counts

if TYPE_CHECKING:
    from api.conftest import MakeEnv, ProbeSink, ProbeSinks

WORDS = [f"w{(i * 7919) % 13}" for i in range(240)] + ["solo", "", "ünï", "w1"]


def _count(
    make_env: MakeEnv, probe_sink: ProbeSinks, items: list[Any], *, columnar: bool, parallelism: int,
    batch_size: int, splits: int = 2,
) -> tuple[list[Any], ProbeSink]:
    """Counts `items` by value; returns (records, the sink that saw the batches)."""
    env = make_env(parallelism=parallelism, batch_size=batch_size)
    sink = probe_sink()
    stream = env.from_source(ListSource(items, splits=splits))
    if columnar:
        stream.map_batches(lambda b: b).key_by("value").count().sink_to(sink)
    else:
        stream.key_by(lambda v: v).count().sink_to(sink)
    env.execute("count")
    return sorted(sink.values(), key=repr), sink


def test_running_count_per_key_in_order(make_env: MakeEnv) -> None:
    env = make_env(parallelism=1)
    sink = CollectSink()
    env.from_source(ListSource(list("abcaab"))).key_by(lambda w: w).count().sink_to(sink)
    env.execute("count-order")
    assert sink.committed() == [("a", 1), ("b", 1), ("c", 1), ("a", 2), ("a", 3), ("b", 2)]


def test_per_record_path_counts_every_key(make_env: MakeEnv, probe_sink: ProbeSinks) -> None:
    got, sink = _count(make_env, probe_sink, WORDS, columnar=False, parallelism=2, batch_size=16)
    assert got == running_counts(WORDS)
    assert not sink.arrow_batches()  # the per-record path emits Python records


@pytest.mark.parametrize("batch_size", [1, 2, 5, 17, 1024])
@pytest.mark.parametrize("parallelism", [1, 2])
def test_columnar_path_matches_per_record_path(
    make_env: MakeEnv, probe_sink: ProbeSinks, batch_size: int, parallelism: int
) -> None:
    per_record, _ = _count(make_env, probe_sink, WORDS, columnar=False, parallelism=parallelism, batch_size=batch_size)
    columnar, sink = _count(make_env, probe_sink, WORDS, columnar=True, parallelism=parallelism, batch_size=batch_size)
    assert columnar == per_record == running_counts(WORDS)
    # and the columnar run really was vectorized: the count emitted Arrow batches
    assert len(sink.arrow_batches()) == len(sink.batches) > 0
    assert all(b.schema.names == ["value", "count"] for b in sink.arrow_batches())
    assert all(b.schema.field("count").type == pa.int64() for b in sink.arrow_batches())


def test_columnar_integer_keys_match_per_record(make_env: MakeEnv, probe_sink: ProbeSinks) -> None:
    items = [i % 9 - 4 for i in range(100)]
    per_record, _ = _count(make_env, probe_sink, items, columnar=False, parallelism=2, batch_size=7)
    columnar, sink = _count(make_env, probe_sink, items, columnar=True, parallelism=2, batch_size=7)
    assert columnar == per_record == running_counts(items)
    assert sink.arrow_batches()


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    words=st.lists(st.sampled_from(["a", "b", "c", "dd", "é", "x y"]), min_size=1, max_size=60),
    batch_size=st.integers(1, 12),
    parallelism=st.integers(1, 3),
    splits=st.integers(1, 3),
)
def test_columnar_and_per_record_agree_for_any_batching(
    make_env: MakeEnv, probe_sink: ProbeSinks, words: list[str], batch_size: int, parallelism: int, splits: int
) -> None:
    kwargs = {"parallelism": parallelism, "batch_size": batch_size, "splits": splits}
    per_record, _ = _count(make_env, probe_sink, list(words), columnar=False, **kwargs)
    columnar, sink = _count(make_env, probe_sink, list(words), columnar=True, **kwargs)
    assert columnar == per_record == running_counts(words)
    assert len(sink.arrow_batches()) == len(sink.batches) > 0


def test_text_lines_counted_by_column_match_per_record(
    make_env: MakeEnv, probe_sink: ProbeSinks, tmp_path: Path
) -> None:
    lines = [f"line {i % 11}" for i in range(300)]
    (tmp_path / "a.txt").write_text("\n".join(lines[:150]) + "\n")
    (tmp_path / "b.txt").write_text("\n".join(lines[150:]) + "\n")
    results = {}
    for columnar in (False, True):
        env = make_env(parallelism=2, batch_size=32)
        sink = probe_sink()
        src = env.from_source(TextFileSource(str(tmp_path), split_size=512))
        if columnar:
            src.key_by("line").count().sink_to(sink)
        else:
            src.map(str).key_by(lambda line: line).count().sink_to(sink)
        env.execute("count-text")
        results[columnar] = sorted(sink.values(), key=repr)
        assert bool(sink.arrow_batches()) is columnar
    assert results[True] == results[False] == running_counts(lines)


def test_columnar_null_keys_match_per_record(make_env: MakeEnv, probe_sink: ProbeSinks) -> None:
    items = [{"k": "a"}, {"k": None}, {"k": "a"}, {"k": None}]
    results: list[list[Any]] = []
    for columnar in (False, True):
        env = make_env(parallelism=1)
        sink = probe_sink()
        stream = env.from_source(ListSource(items))
        if columnar:
            stream = stream.map_batches(lambda b: b)
        stream.key_by("k").count().sink_to(sink)
        env.execute("count-null")
        results.append(sorted(sink.values(), key=repr))
        assert bool(sink.arrow_batches()) is columnar  # the columnar run counted Arrow batches
    assert results[0] == results[1] == running_counts(["a", None, "a", None])


def test_issue_wordcount_example(tmp_path: Path) -> None:
    """The example of the issue: text files in, word counts out through a FileSink."""
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "one.txt").write_text("the cat sat\non the mat\n")
    (corpus / "two.txt").write_text("the end\n")
    out = tmp_path / "out"
    env = StreamEnvironment(
        parallelism=2,
        checkpoint=CheckpointConfig(interval=1.0, directory=str(tmp_path / "ckpt")),
        executor="inprocess",
    )
    counts = env.from_source(TextFileSource(str(corpus))).flat_map(str.split).key_by(lambda w: w).count()
    counts.sink_to(FileSink(str(out)))
    result = env.execute("wordcount")
    assert result.restarts == 0
    assert result.checkpoints and result.checkpoints[-1].is_final
    records = read_committed(str(out))
    words = ["the", "cat", "sat", "on", "the", "mat", "the", "end"]
    assert sorted(map(tuple, records)) == running_counts(words)
    finals: dict[str, int] = {}
    for word, n in records:
        finals[word] = max(finals.get(word, 0), n)
    assert finals == dict(Counter(words))
