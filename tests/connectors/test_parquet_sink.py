"""ParquetSink: committed files exactly once across failures, idempotent commits, Spark's file-sink
log (`_spark_metadata`) as Spark writes and reads it, the start modes, and Spark reading exactly
the committed files (marked spark), also after a SIGKILL of a worker (marked fault)."""

from __future__ import annotations

import json
import os
import random
import shutil
import threading
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest

from epochal import CheckpointConfig, EpochalError, RestartStrategy, StreamEnvironment
from epochal.cluster.inprocess import InProcessExecutor
from epochal.connectors import ParquetSink, TextFileSource
from epochal.connectors.arrow_files import ArrowConformer
from epochal.connectors.parquet import METADATA_DIR, SparkSinkLog
from epochal.testing import ListSource
from spark_jobs import expected_updates, run_and_kill, slow_split, write_corpus

TRIALS = 6


def committed_rows(out: str) -> list[tuple[Any, ...]]:
    """The rows of the visible files (pyarrow skips hidden `.part-…inprogress` and `_spark_metadata`)."""
    table = ds.dataset(out, format="parquet").to_table()
    return sorted(zip(*(c.to_pylist() for c in table.columns)))


def log_entries(out: str) -> list[dict[str, Any]]:
    """Every entry of the `_spark_metadata` log, read as Spark reads it: the latest compaction
    (if any) and every batch after it."""
    directory = os.path.join(out, METADATA_DIR)
    stems = {n: n.removesuffix(".compact") for n in os.listdir(directory)}
    batches = {int(stem): n for n, stem in stems.items() if stem.isdigit()}
    latest = max(batches)
    compactions = [b for b, n in batches.items() if n.endswith(".compact")]
    start = max(compactions, default=0)
    entries = []
    for batch_id in range(start, latest + 1):
        with open(os.path.join(directory, batches[batch_id]), encoding="utf-8") as f:
            lines = f.read().split("\n")
        assert lines[0] == "v1"
        entries.extend(json.loads(line) for line in lines[1:])
    return entries


def visible_part_files(out: str) -> list[str]:
    return sorted(n for n in os.listdir(out) if n.startswith("part-"))


def _wordcount(corpus: str, out: str, ckpt: str, fail_at: int | None, seed: int, **sink: Any) -> Any:
    calls = {"n": 0}

    def split(line: str) -> list[str]:
        calls["n"] += 1
        if calls["n"] == fail_at:
            raise ValueError(f"injected at record {fail_at}")
        return line.split()

    env = StreamEnvironment(
        parallelism=2, executor="inprocess", seed=seed, batch_size=32,
        checkpoint=CheckpointConfig(interval=0.005, directory=ckpt),
    )
    env.from_source(TextFileSource(corpus)).flat_map(split).key_by(lambda w: w).count().sink_to(
        ParquetSink(out, compact_interval=3, **sink)
    )
    return InProcessExecutor(seed=seed, virtual_time=True).execute(env.job_graph("wordcount"))


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = str(tmp_path_factory.mktemp("corpus"))
    write_corpus(path, files=3, lines=400)
    return path


def test_a_failure_at_a_random_record_changes_nothing_committed_nor_logged(corpus: str, tmp_path: Path) -> None:
    expected = expected_updates(corpus)
    restored = 0
    for trial in range(TRIALS):
        rng = random.Random(trial)
        out, ckpt = str(tmp_path / f"out{trial}"), str(tmp_path / f"ckpt{trial}")
        result = _wordcount(corpus, out, ckpt, fail_at=rng.randrange(300, 1200), seed=trial)
        assert result.restarts == 1, f"trial {trial}"
        assert committed_rows(out) == expected, f"trial {trial}"
        # the log lists exactly the visible files, once each; no staging file is left
        listed = [Path(e["path"].removeprefix("file://")).name for e in log_entries(out)]
        assert sorted(listed) == visible_part_files(out), f"trial {trial}"
        assert not [n for n in os.listdir(out) if n.endswith(".inprogress")], f"trial {trial}"
        restored += result.restored_from[-1] is not None
    assert restored >= 2, "too few failures restored from a checkpoint"


def _staged(sink: ParquetSink, subtask: int, checkpoint_id: int, rows: list[Any]) -> Any:
    writer = sink.create_writer(subtask, 2)
    writer.write(rows)
    return writer.prepare_commit(checkpoint_id)


def test_committing_the_same_committables_again_adds_nothing(tmp_path: Path) -> None:
    sink = ParquetSink(tmp_path / "out")
    first, second = _staged(sink, 0, 1, [("a", 1), ("b", 2)]), _staged(sink, 1, 1, [("c", 3)])
    sink.commit([first, second])
    sink.commit([first, second])
    ParquetSink(tmp_path / "out").commit([first])  # another process, with no cache of the log
    assert committed_rows(str(tmp_path / "out")) == [("a", 1), ("b", 2), ("c", 3)]
    assert len(log_entries(str(tmp_path / "out"))) == 2
    assert os.listdir(tmp_path / "out" / METADATA_DIR) == ["0"]


def test_a_commit_cut_short_between_the_rename_and_the_log_is_finished_by_the_next(tmp_path: Path) -> None:
    sink = ParquetSink(tmp_path / "out")
    pending = _staged(sink, 0, 1, [("a", 1)])
    os.replace(pending.staging, pending.final)  # renamed, then the process died
    assert not os.path.exists(tmp_path / "out" / METADATA_DIR / "0")
    sink.commit([pending])
    assert [Path(e["path"]).name for e in log_entries(str(tmp_path / "out"))] == [Path(pending.final).name]


def test_a_staged_file_that_is_gone_and_not_renamed_fails_the_commit(tmp_path: Path) -> None:
    sink = ParquetSink(tmp_path / "out")
    pending = _staged(sink, 0, 1, [("a", 1)])
    os.remove(pending.staging)
    with pytest.raises(EpochalError, match="is gone"):
        sink.commit([pending])


def test_the_log_is_spark_s_format_and_compacts_every_interval(tmp_path: Path) -> None:
    out = tmp_path / "out"
    sink = ParquetSink(out, compact_interval=3)
    finals = []
    for checkpoint_id in range(1, 8):
        pending = _staged(sink, 0, checkpoint_id, [("w", checkpoint_id)])
        sink.commit([pending])
        finals.append(pending.final)
    assert sorted(os.listdir(out / METADATA_DIR)) == ["0", "1", "2.compact", "3", "4", "5.compact", "6"]
    with open(out / METADATA_DIR / "0", encoding="utf-8") as f:
        text = f.read()
    first_line, entry_line = text.split("\n")  # "v1", then one JSON line per file; no newline at the end
    entry = json.loads(entry_line)
    assert first_line == "v1"
    assert list(entry) == ["path", "size", "isDir", "modificationTime", "blockReplication", "blockSize", "action"]
    assert entry["path"] == Path(finals[0]).as_uri() and entry["action"] == "add" and entry["isDir"] is False
    assert entry["size"] == os.path.getsize(finals[0])
    with open(out / METADATA_DIR / "5.compact", encoding="utf-8") as f:
        assert len(f.read().split("\n")) == 1 + 6  # every file up to batch 5
    assert [e["path"] for e in log_entries(str(out))] == [Path(p).as_uri() for p in finals]


def test_subtasks_committing_at_once_take_consecutive_batch_ids(tmp_path: Path) -> None:
    out = tmp_path / "out"
    pendings = [_staged(ParquetSink(out), s, 1, [("w", s)]) for s in range(6)]
    sinks = [ParquetSink(out, compact_interval=4) for _ in pendings]  # one per process: no shared cache
    threads = [threading.Thread(target=s.commit, args=([p],)) for s, p in zip(sinks, pendings)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(os.listdir(out / METADATA_DIR)) == ["0", "1", "2", "3.compact", "4", "5"]
    assert sorted(e["path"] for e in log_entries(str(out))) == sorted(Path(p.final).as_uri() for p in pendings)


def test_a_log_written_with_another_interval_keeps_it() -> None:
    from epochal.connectors.parquet import _compact_interval

    assert _compact_interval(10, []) == 10
    assert _compact_interval(10, [29, 19]) == 10
    assert _compact_interval(10, [5]) == 6  # Spark's deriveCompactInterval: 5.compact, then 11.compact
    assert _compact_interval(5, [11]) == 6
    assert _compact_interval(10, [99]) == 10


def test_records_become_columns_by_a_schema_and_arrow_batches_are_cast_to_it(tmp_path: Path) -> None:
    schema = pa.schema([("word", pa.string()), ("n", pa.int64())])
    conform = ArrowConformer(schema)
    assert conform([("a", 1)]).to_pylist() == [{"word": "a", "n": 1}]
    assert conform([{"n": 2, "word": "b"}]).to_pylist() == [{"word": "b", "n": 2}]
    by_name = pa.RecordBatch.from_pydict({"n": pa.array([3], pa.int32()), "word": ["c"]})
    assert conform(by_name).schema == schema and conform(by_name).to_pylist() == [{"word": "c", "n": 3}]
    by_position = pa.RecordBatch.from_pydict({"key": ["d"], "count": [4]})
    assert conform(by_position).to_pylist() == [{"word": "d", "n": 4}]
    with pytest.raises(ValueError, match="fields"):
        conform([("a", 1, 2)])
    inferred = ArrowConformer(None)
    assert inferred([("a", 1)]).schema.names == ["f0", "f1"]
    assert inferred([("b", 2)]).to_pylist() == [{"f0": "b", "f1": 2}]


def test_arrow_batches_are_written_as_they_come_in_one_file_per_subtask_and_checkpoint(tmp_path: Path) -> None:
    out = str(tmp_path / "out")
    env = StreamEnvironment(parallelism=2, executor="inprocess", batch_size=100)
    words = [f"w{i % 7}" for i in range(500)]
    (
        env.from_source(ListSource(words, splits=2))
        .map_batches(lambda b: pa.RecordBatch.from_arrays([b.column(0)], names=["word"]))
        .key_by("word")
        .count()
        .sink_to(ParquetSink(out))
    )
    env.execute("columnar")
    table = ds.dataset(out).to_table()
    assert table.schema.names == ["word", "count"] and table.num_rows == 500
    assert len(visible_part_files(out)) == 2  # no periodic checkpoint: the final one, per subtask
    assert pq.ParquetFile(os.path.join(out, visible_part_files(out)[0])).metadata.num_row_groups == 1


def test_modes_on_a_fresh_start(tmp_path: Path) -> None:
    out = tmp_path / "out"

    def run(mode: str) -> None:
        env = StreamEnvironment(parallelism=1, executor="inprocess")
        env.from_source(ListSource(["a", "b"])).map(lambda w: (w, 1)).sink_to(ParquetSink(out, mode=mode))
        env.execute("modes")

    run("error")
    with pytest.raises(EpochalError, match='mode="overwrite"'):
        run("error")
    run("append")
    assert committed_rows(str(out)) == [("a", 1), ("a", 1), ("b", 1), ("b", 1)]
    (out / ".part-00000-0123456789ab.parquet.inprogress").write_bytes(b"left by a dead run")
    run("overwrite")
    assert committed_rows(str(out)) == [("a", 1), ("b", 1)] and len(log_entries(str(out))) == 1
    assert not [n for n in os.listdir(out) if n.endswith(".inprogress")]


def test_a_directory_that_cannot_be_written_fails_before_the_job(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    env = StreamEnvironment(parallelism=1, executor="inprocess")
    env.from_source(ListSource([1])).sink_to(ParquetSink(blocker / "out"))
    with pytest.raises(EpochalError, match="cannot write"):
        env.execute("unwritable")


def test_the_log_cache_reads_what_other_processes_wrote_since(tmp_path: Path) -> None:
    out = tmp_path / "out"
    sink_a, sink_b = ParquetSink(out), ParquetSink(out)
    a, b = _staged(sink_a, 0, 1, [("a", 1)]), _staged(sink_b, 1, 1, [("b", 1)])
    sink_a.commit([a])
    sink_b.commit([b])
    log = sink_a.spark_log()
    assert isinstance(log, SparkSinkLog) and log.listed() == {Path(a.final).as_uri(), Path(b.final).as_uri()}


# -- Spark ---------------------------------------------------------------------------------------------
@pytest.mark.spark
def test_spark_reads_exactly_the_committed_files(spark: Any, tmp_path: Path) -> None:
    out = tmp_path / "out"
    sink = ParquetSink(out, schema=pa.schema([("word", pa.string()), ("n", pa.int64())]))
    sink.commit([_staged(sink, 0, 1, [("a", 1), ("b", 2)]), _staged(sink, 1, 1, [("c", 3)])])
    _staged(sink, 0, 2, [("staged", 9)])  # prepared, never committed: a hidden staging file
    uncommitted = _staged(sink, 1, 2, [("renamed", 9)])  # a visible file the log does not list
    os.replace(uncommitted.staging, uncommitted.final)
    rows = sorted(tuple(r) for r in spark.read.parquet(str(out)).collect())
    assert rows == [("a", 1), ("b", 2), ("c", 3)]
    assert sorted(spark.read.parquet(str(out)).columns) == ["n", "word"]
    # without the log Spark lists the directory, and reads the visible file no commit listed
    shutil.rmtree(out / METADATA_DIR)
    assert ("renamed", 9) in [tuple(r) for r in spark.read.parquet(str(out)).collect()]


@pytest.mark.spark
@pytest.mark.fault
def test_sigkill_of_a_worker_commits_every_update_once_and_spark_reads_them(spark: Any, tmp_path: Path) -> None:
    corpus, out, ckpt = str(tmp_path / "corpus"), str(tmp_path / "out"), str(tmp_path / "ckpt")
    write_corpus(corpus, files=4, lines=800)
    env = StreamEnvironment(
        parallelism=2, spark=spark, batch_size=64,
        checkpoint=CheckpointConfig(interval=0.3, directory=ckpt), restart=RestartStrategy(max_restarts=3),
    )
    env.from_source(TextFileSource(corpus)).flat_map(slow_split).key_by(lambda w: w).count().sink_to(
        ParquetSink(out, compact_interval=4)
    )
    result, _ = run_and_kill(spark, env, "wordcount", ckpt, random.Random(5), delay=(0.0, 1.5))
    assert result.restarts == 1
    expected = expected_updates(corpus)
    assert committed_rows(out) == expected
    assert sorted(tuple(r) for r in spark.read.parquet(out).collect()) == expected
    listed = sorted(Path(e["path"]).name for e in log_entries(out))
    assert listed == visible_part_files(out)
