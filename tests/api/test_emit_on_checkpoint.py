"""`emit="on_checkpoint"`: keyed counts and reduces emit each changed key's newest value once per
epoch, ahead of the checkpoint's barrier, instead of one update per record; exactly once across
failures, on the per-record and the columnar paths alike."""

from __future__ import annotations

import collections
import random
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from epochal import CheckpointConfig, StreamEnvironment
from epochal.api.connector import Source, SplitReader
from epochal.connectors import FileSink, TextFileSource, read_committed
from epochal.testing import CollectSink, Crash, ListSource
from spark_jobs import check_per_epoch_updates, word_counts, write_corpus

WORDS = [f"w{i % 37}" for i in range(5_000)]
TOTALS = dict(collections.Counter(WORDS))


def _paced(x: Any) -> Any:
    time.sleep(0.0001)  # the job spans many checkpoint intervals
    return x


def _env(tmp_path: Path, interval: float = 0.02, **kwargs: Any) -> StreamEnvironment:
    return StreamEnvironment(parallelism=2, executor="inprocess", batch_size=50,
                             checkpoint=CheckpointConfig(interval=interval, directory=str(tmp_path / "c")), **kwargs)


def test_a_count_emits_each_changed_key_once_per_checkpoint(tmp_path: Path) -> None:
    env = _env(tmp_path)
    sink = CollectSink()
    env.from_source(ListSource(WORDS, splits=2)).map(_paced).key_by(lambda w: w).count(
        emit="on_checkpoint").sink_to(sink)
    result = env.execute("per-epoch")
    updates = sink.committed()
    check_per_epoch_updates(updates, TOTALS)
    assert len(result.checkpoints) > 3  # several epochs, each emitting its changed keys
    assert len(updates) <= len(TOTALS) * len(result.checkpoints) < len(WORDS)
    assert result.operator("count").records_out == len(updates)


def test_without_checkpoints_the_counts_come_at_the_end_of_the_input() -> None:
    env = StreamEnvironment(parallelism=2, executor="inprocess")
    sink = CollectSink()
    env.from_source(ListSource(WORDS, splits=2)).key_by(lambda w: w).count(emit="on_checkpoint").sink_to(sink)
    env.execute("at-the-end")
    assert sorted(sink.committed()) == sorted(TOTALS.items())


def test_a_failure_replays_the_aborted_epoch_and_commits_each_update_once(tmp_path: Path) -> None:
    items: list[Any] = list(WORDS)
    items.insert(4_500, Crash())  # late enough for a checkpoint first, whatever the scheduling
    env = _env(tmp_path)
    sink = CollectSink()
    env.from_source(ListSource(items, splits=2)).map(_paced).key_by(lambda w: w).count(
        emit="on_checkpoint").sink_to(sink)
    result = env.execute("per-epoch-crash")
    assert result.restarts == 1 and result.restored_from[-1] is not None
    check_per_epoch_updates(sink.committed(), TOTALS)


def test_a_reduce_emits_each_changed_key_s_newest_value_once_per_checkpoint(tmp_path: Path) -> None:
    pairs = [(f"k{i % 11}", i) for i in range(3_000)]
    env = _env(tmp_path)
    sink = CollectSink()
    (env.from_source(ListSource(pairs, splits=2)).map(_paced).key_by(lambda p: p[0])
        .reduce(lambda a, b: (a[0], a[1] + b[1]), emit="on_checkpoint").sink_to(sink))
    env.execute("per-epoch-reduce")
    sums = collections.Counter()
    for key, value in pairs:
        sums[key] += value
    check_per_epoch_updates(sink.committed(), dict(sums))


def _split_words(lines: pa.RecordBatch) -> pa.RecordBatch:
    time.sleep(0.002)  # the job spans many checkpoint intervals
    words = pc.list_flatten(pc.utf8_split_whitespace(lines.column("line")))
    return pa.RecordBatch.from_arrays([pc.filter(words, pc.not_equal(words, ""))], names=["word"])


@pytest.mark.parametrize("backend", ["memory", "disk"])
def test_the_columnar_count_emits_arrow_batches_per_epoch(tmp_path: Path, backend: str) -> None:
    corpus = str(tmp_path / "corpus")
    write_corpus(corpus)
    env = _env(tmp_path, interval=0.02, state_backend=backend)
    sink = CollectSink()
    (env.from_source(TextFileSource(corpus)).map_batches(_split_words)
        .key_by("word").count(emit="on_checkpoint").sink_to(sink))
    env.execute("columnar-per-epoch")
    updates = [(r["word"], r["count"]) if isinstance(r, dict) else tuple(r) for r in sink.committed()]
    totals = word_counts(corpus)
    check_per_epoch_updates(updates, totals)  # type: ignore[arg-type]
    assert len(totals) < len(updates) < sum(totals.values())  # several epochs emitted


class _MixedReader(SplitReader):
    """Batches of `{"word": w}` records, every other one as an Arrow batch."""

    def __init__(self, words: list[str], position: int) -> None:
        self.words, self.next = words, position

    def read(self, max_records: int) -> Any:
        if self.next >= len(self.words):
            return None
        chunk = self.words[self.next : self.next + 40]
        arrow = (self.next // 40) % 2 == 1
        self.next += len(chunk)
        time.sleep(0.001)
        return pa.RecordBatch.from_pydict({"word": chunk}) if arrow else [{"word": w} for w in chunk]

    def position(self) -> int:
        return self.next


class _Mixed(Source):
    def __init__(self, words: list[str]) -> None:
        self.words = words

    def splits(self) -> list[Any]:
        return [type("S", (), {"split_id": "mixed"})()]

    def open_split(self, split: Any, position: Any | None) -> SplitReader:
        return _MixedReader(self.words, position or 0)


def test_record_and_arrow_batches_in_one_epoch_emit_each_key_once(tmp_path: Path) -> None:
    words = [random.Random(i).choice(WORDS) for i in range(4_000)]
    env = _env(tmp_path, interval=0.02)
    sink = CollectSink()
    env.from_source(_Mixed(words)).key_by("word").count(emit="on_checkpoint").sink_to(sink)
    env.execute("mixed")
    updates = [(r["word"], r["count"]) if isinstance(r, dict) else tuple(r) for r in sink.committed()]
    totals = dict(collections.Counter(words))
    check_per_epoch_updates(updates, totals)  # type: ignore[arg-type]
    assert len(totals) < len(updates) < len(words)  # several epochs emitted


def test_emit_must_be_a_known_choice() -> None:
    env = StreamEnvironment(executor="inprocess")
    with pytest.raises(ValueError, match="emit"):
        env.from_source(ListSource([1])).key_by(lambda x: x).count(emit="sometimes")  # type: ignore[arg-type]


def test_the_file_sink_commits_one_row_per_changed_word_per_checkpoint(tmp_path: Path) -> None:
    corpus, out = str(tmp_path / "corpus"), str(tmp_path / "out")
    write_corpus(corpus)
    env = _env(tmp_path, interval=0.02)
    (env.from_source(TextFileSource(corpus)).map_batches(_split_words)
        .key_by("word").count(emit="on_checkpoint").sink_to(FileSink(out)))
    result = env.execute("to-files")
    totals = word_counts(corpus)
    updates = [tuple(r) for r in read_committed(out)]
    check_per_epoch_updates(updates, totals)  # type: ignore[arg-type]
    assert len(totals) < result.operator("count").records_out == len(updates) < sum(totals.values())
