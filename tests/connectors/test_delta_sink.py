"""DeltaSink: rows committed exactly once by Delta's application transaction ids, across a failure at
a random record and a crash between the Delta commit and the end of the checkpoint's completion
notice; idempotent commits; upserts (one row per key, the newest); conflicting subtasks; start
modes; the table read by deltalake, polars and DuckDB; SIGKILLs on Spark (marked spark, fault).

Tables are read with deltalake's DataFusion queries, not `DeltaTable.to_pyarrow_table()`: the
latter leaves pyarrow I/O threads holding Python buffers that abort the interpreter at exit
(deltalake 1.6, pyarrow 26).
"""

from __future__ import annotations

import json
import os
import random
import signal
import sys
import threading
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

deltalake = pytest.importorskip("deltalake")

from epochal import CheckpointConfig, EpochalError, RestartStrategy, StreamEnvironment  # noqa: E402
from epochal.cluster.inprocess import InProcessExecutor  # noqa: E402
from epochal.connectors import DeltaSink, TextFileSource  # noqa: E402
from epochal.connectors.delta import STAGING_DIR, delta_stats, newest_per_key  # noqa: E402
from epochal.errors import InjectedFailure  # noqa: E402
from epochal.testing import ListSource  # noqa: E402
from spark_jobs import complete_checkpoints, expected_updates, run_and_kill, slow_split, write_corpus  # noqa: E402

TRIALS = 4
SCHEMA = pa.schema([("word", pa.string()), ("n", pa.int64())])


def table_rows(path: str | Path) -> list[tuple[Any, ...]]:
    """The table's rows at its latest version, sorted."""
    table = deltalake.DeltaTable(str(path))
    result = pa.table(deltalake.QueryBuilder().register("t", table).execute("SELECT * FROM t").read_all())
    return sorted(zip(*(c.to_pylist() for c in result.columns)))


def txn_actions(path: str | Path) -> list[tuple[str, int]]:
    """(appId, version) of every txn action in the table's log, one per commit that wrote one."""
    log = Path(path) / "_delta_log"
    found = []
    for name in sorted(n for n in os.listdir(log) if n.endswith(".json")):
        for line in (log / name).read_text().splitlines():
            action = json.loads(line)
            if "txn" in action:
                found.append((action["txn"]["appId"], action["txn"]["version"]))
    return found


def final_counts(corpus: str) -> list[tuple[str, int]]:
    counts: dict[str, int] = {}
    for word, n in expected_updates(corpus):
        counts[word] = max(counts.get(word, 0), n)
    return sorted(counts.items())


class CrashAfterDeltaCommit(DeltaSink):
    """Raises once right after a Delta commit, before the notice that asked for it is done: the
    restored attempt commits the same committables again."""

    def __init__(self, path: str, after_commits: int, **options: Any) -> None:
        super().__init__(path, **options)
        self.after_commits = after_commits
        self.commits = 0

    def commit(self, committables: list[Any]) -> None:
        super().commit(committables)
        self.commits += 1
        if self.commits == self.after_commits:
            raise InjectedFailure("crash between the Delta commit and the end of the notice")


def _wordcount(corpus: str, sink: DeltaSink, ckpt: str, fail_at: int | None, seed: int) -> Any:
    calls = {"n": 0, "failed": False}

    def split(line: str) -> list[str]:
        # fails once, at the first record from `fail_at` on that comes after a complete checkpoint
        calls["n"] += 1
        if fail_at is not None and calls["n"] >= fail_at and not calls["failed"] and complete_checkpoints(ckpt):
            calls["failed"] = True
            raise ValueError(f"injected at record {calls['n']}")
        return line.split()

    env = StreamEnvironment(
        parallelism=2, executor="inprocess", seed=seed, batch_size=32,
        checkpoint=CheckpointConfig(interval=0.005, directory=ckpt),
    )
    env.from_source(TextFileSource(corpus)).flat_map(split).key_by(lambda w: w).count().sink_to(sink)
    return InProcessExecutor(seed=seed, virtual_time=True).execute(env.job_graph("wordcount"))


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = str(tmp_path_factory.mktemp("corpus"))
    write_corpus(path, files=3, lines=400)
    return path


def test_a_failure_at_a_random_record_commits_every_update_once(corpus: str, tmp_path: Path) -> None:
    expected = expected_updates(corpus)
    restored = 0
    for trial in range(TRIALS):
        rng = random.Random(trial)
        table, ckpt = str(tmp_path / f"t{trial}"), str(tmp_path / f"ckpt{trial}")
        result = _wordcount(corpus, DeltaSink(table, schema=SCHEMA), ckpt, rng.randrange(1, 1000), trial)
        assert result.restarts == 1, f"trial {trial}"
        assert table_rows(table) == expected, f"trial {trial}"
        restored += result.restored_from[-1] is not None
    assert restored == TRIALS, "every failure comes after a checkpoint"


def test_upserts_keep_the_newest_row_per_key_across_a_failure(corpus: str, tmp_path: Path) -> None:
    table = str(tmp_path / "t")
    result = _wordcount(corpus, DeltaSink(table, merge_key="word", schema=SCHEMA), str(tmp_path / "ckpt"), 500, 1)
    assert result.restarts == 1 and result.restored_from[-1] is not None
    assert table_rows(table) == final_counts(corpus)
    assert not os.listdir(os.path.join(table, STAGING_DIR)), "staging files are deleted once committed"


@pytest.mark.parametrize("merge_key", [None, "word"])
def test_a_crash_between_the_delta_commit_and_the_end_of_the_notice_commits_nothing_twice(
    corpus: str, tmp_path: Path, merge_key: str | None
) -> None:
    table = str(tmp_path / "t")
    sink = CrashAfterDeltaCommit(table, after_commits=6, merge_key=merge_key, schema=SCHEMA)
    result = _wordcount(corpus, sink, str(tmp_path / "ckpt"), None, 2)
    assert result.restarts == 1 and result.restored_from[-1] is not None
    assert table_rows(table) == (final_counts(corpus) if merge_key else expected_updates(corpus))
    # the restored attempt found its committables in the table: skipped, not committed again
    txns = txn_actions(table)
    # one app id per subtask: the run's lineage goes on across attempts (idempotent per epoch)
    assert len(txns) == len(set(txns)) and len({app for app, _ in txns}) == 2


def _committable(sink: DeltaSink, subtask: int, checkpoint_id: int, rows: list[Any]) -> Any:
    writer = sink.create_writer(subtask, 2)
    writer.write(rows)
    return writer.prepare_commit(checkpoint_id)


def test_committing_the_same_committables_again_adds_nothing(tmp_path: Path) -> None:
    sink = DeltaSink(tmp_path / "t")
    one = _committable(sink, 0, 1, [("a", 1), ("b", 2)])
    sink.commit([one])
    version = deltalake.DeltaTable(str(tmp_path / "t")).version()
    sink.commit([one])
    DeltaSink(tmp_path / "t").commit([one])  # another process
    assert deltalake.DeltaTable(str(tmp_path / "t")).version() == version
    two = _committable(sink, 0, 2, [("c", 3)])
    assert two.app_id != one.app_id  # a writer without a lineage (outside a job): an app id of its own
    same_writer = sink.create_writer(0, 2)
    same_writer.write([("d", 4)])
    first = same_writer.prepare_commit(3)
    same_writer.write([("e", 5)])
    second = same_writer.prepare_commit(4)
    sink.commit([first])
    sink.commit([first, second, two])  # only what the table lacks: second and two
    assert table_rows(tmp_path / "t") == [("a", 1), ("b", 2), ("c", 3), ("d", 4), ("e", 5)]
    assert deltalake.DeltaTable(str(tmp_path / "t")).transaction_version(first.app_id) == 4


def test_an_epoch_replayed_at_its_cut_by_a_writer_of_the_same_lineage_is_skipped(tmp_path: Path) -> None:
    sink = DeltaSink(tmp_path / "t", schema=SCHEMA)
    for _attempt in range(2):  # the epoch, then its replay after a fallback to an older checkpoint
        writer = sink.create_writer(1, 2)
        writer.set_lineage("0123456789abcdef")
        writer.write([("a", 1), ("b", 2)])
        committable = writer.prepare_commit(4)
        assert committable.app_id == "epochal-0123456789abcdef-s1"
        sink.commit([committable])
    assert table_rows(tmp_path / "t") == [("a", 1), ("b", 2)]
    other = sink.create_writer(1, 2)
    other.set_lineage("fedcba9876543210")  # another run: its epoch 4 is its own
    other.write([("c", 3)])
    sink.commit([other.prepare_commit(4)])
    assert table_rows(tmp_path / "t") == [("a", 1), ("b", 2), ("c", 3)]


def test_subtasks_that_commit_upserts_at_once_both_land(tmp_path: Path) -> None:
    path = tmp_path / "t"
    DeltaSink(path, merge_key="word", schema=SCHEMA).check(resuming=False)
    sinks = [DeltaSink(path, merge_key="word") for _ in range(3)]  # one per process
    rounds = [[_committable(s, i, cid, [(f"w{i}", cid), ("shared", 10 * i + cid)]) for cid in (1, 2, 3)]
              for i, s in enumerate(sinks)]

    def commit_all(sink: DeltaSink, mine: list[Any]) -> None:
        for c in mine:
            sink.commit([c])

    threads = [threading.Thread(target=commit_all, args=(s, r)) for s, r in zip(sinks, rounds)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    rows = dict(table_rows(path))
    assert {k: v for k, v in rows.items() if k != "shared"} == {"w0": 3, "w1": 3, "w2": 3}
    assert rows["shared"] in {3, 13, 23}  # keys split across subtasks: one of their newest rows


def test_upserts_take_the_last_row_of_a_key_in_a_checkpoint(tmp_path: Path) -> None:
    rows = pa.table({"k": ["a", "b", "a", "c", "b"], "v": [1, 2, 3, 4, 5]})
    assert newest_per_key(rows, ["k"]).to_pylist() == [
        {"k": "a", "v": 3}, {"k": "c", "v": 4}, {"k": "b", "v": 5}
    ]
    with pytest.raises(ValueError, match=r"merge_key \['word'\] is not a column"):
        _committable(DeltaSink(tmp_path / "t", merge_key="word"), 0, 1, [("x", 1)])
    sink = DeltaSink(tmp_path / "t", merge_key="word", schema=SCHEMA)
    sink.commit([_committable(sink, 0, 1, [("x", 1), ("y", 1), ("x", 2)])])
    sink.commit([_committable(sink, 0, 2, [("y", 7)])])
    assert table_rows(tmp_path / "t") == [("x", 2), ("y", 7)]


def test_stats_give_readers_counts_nulls_and_ranges(tmp_path: Path) -> None:
    table = pa.table({"s": ["b", None, "a"], "i": [5, 2, None], "f": [1.0, 2.0, 3.0]})
    pq.write_table(table, tmp_path / "x.parquet", row_group_size=2)
    stats = json.loads(delta_stats(pq.ParquetFile(tmp_path / "x.parquet").metadata, table.schema))
    assert stats == {
        "numRecords": 3, "nullCount": {"s": 1, "i": 1, "f": 0},
        "minValues": {"s": "a", "i": 2}, "maxValues": {"s": "b", "i": 5},
    }


def test_modes_and_a_schema_that_creates_the_table_before_the_job(tmp_path: Path) -> None:
    path = tmp_path / "t"

    def run(mode: str, words: list[str]) -> None:
        env = StreamEnvironment(parallelism=1, executor="inprocess")
        env.from_source(ListSource(words)).map(lambda w: (w, 1)).sink_to(DeltaSink(path, mode=mode, schema=SCHEMA))
        env.execute("modes")

    DeltaSink(path, schema=SCHEMA).check(resuming=False)
    assert deltalake.DeltaTable(str(path)).version() == 0 and table_rows(path) == []
    run("error", ["a"])  # an empty table is no obstacle
    with pytest.raises(EpochalError, match='mode="overwrite"'):
        run("error", ["b"])
    run("append", ["b"])
    assert table_rows(path) == [("a", 1), ("b", 1)]
    run("overwrite", ["c"])
    assert table_rows(path) == [("c", 1)]
    assert len(deltalake.DeltaTable(str(path)).history()) >= 5  # older versions stay readable


def test_records_are_cast_to_the_existing_table_s_schema(tmp_path: Path) -> None:
    path = tmp_path / "t"
    DeltaSink(path, schema=pa.schema([("word", pa.string()), ("n", pa.float64())])).check(resuming=False)
    sink = DeltaSink(path)
    sink.commit([_committable(sink, 0, 1, [("a", 1)])])
    assert table_rows(path) == [("a", 1.0)]


def test_the_table_reads_the_same_in_polars(tmp_path: Path) -> None:
    path = str(tmp_path / "t")
    sink = DeltaSink(path, schema=SCHEMA)
    sink.commit([_committable(sink, 0, 1, [("a", 1), ("b", 2)]), _committable(sink, 1, 1, [("c", 3)])])
    sink.create_writer(0, 2).write([("uncommitted", 9)])  # a data file no commit lists (not even closed)
    expected = [("a", 1), ("b", 2), ("c", 3)]
    assert table_rows(path) == expected
    polars = pytest.importorskip("polars")
    frame = polars.read_delta(path)
    assert sorted(frame.iter_rows()) == expected


# -- Spark ---------------------------------------------------------------------------------------------
class KillAfterDeltaCommit(DeltaSink):
    """SIGKILLs its own worker right after its `after`-th Delta commit, once per test (a marker file)."""

    commits = 0

    def __init__(self, path: str, marker: str, after: int) -> None:
        super().__init__(path)
        self.marker = marker
        self.after = after

    def commit(self, committables: list[Any]) -> None:
        super().commit(committables)
        KillAfterDeltaCommit.commits += 1
        if KillAfterDeltaCommit.commits >= self.after and not os.path.exists(self.marker):
            with open(self.marker, "w") as f:
                f.write(str(os.getpid()))
            os.kill(os.getpid(), signal.SIGKILL)


def _spark_env(spark: Any, corpus: str, sink: DeltaSink, ckpt: str) -> StreamEnvironment:
    from pyspark import cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules[__name__])  # type: ignore[no-untyped-call]
    env = StreamEnvironment(
        parallelism=2, spark=spark, batch_size=64,
        checkpoint=CheckpointConfig(interval=0.3, directory=ckpt), restart=RestartStrategy(max_restarts=3),
    )
    env.from_source(TextFileSource(corpus)).flat_map(slow_split).key_by(lambda w: w).count().sink_to(sink)
    return env


@pytest.mark.spark
@pytest.mark.fault
def test_sigkill_of_a_worker_commits_every_update_once(spark: Any, tmp_path: Path) -> None:
    corpus, table, ckpt = str(tmp_path / "corpus"), str(tmp_path / "t"), str(tmp_path / "ckpt")
    write_corpus(corpus, files=4, lines=800)
    env = _spark_env(spark, corpus, DeltaSink(table, schema=SCHEMA), ckpt)
    result, _ = run_and_kill(spark, env, "wordcount", ckpt, random.Random(3), delay=(0.0, 1.5))
    assert result.restarts == 1
    assert table_rows(table) == expected_updates(corpus)


@pytest.mark.spark
@pytest.mark.fault
def test_sigkill_between_the_delta_commit_and_the_end_of_the_notice_commits_nothing_twice(
    spark: Any, tmp_path: Path
) -> None:
    from epochal.cluster.spark import SparkExecutor

    corpus, table, ckpt = str(tmp_path / "corpus"), str(tmp_path / "t"), str(tmp_path / "ckpt")
    marker = str(tmp_path / "killed")
    write_corpus(corpus, files=4, lines=800)
    DeltaSink(table, schema=SCHEMA).check(resuming=False)
    env = _spark_env(spark, corpus, KillAfterDeltaCommit(table, marker, after=4), ckpt)
    result = SparkExecutor(spark).execute(env.job_graph("wordcount"))
    assert os.path.exists(marker), "no worker was killed"
    assert result.restarts == 1 and result.restored_from[-1] is not None
    assert table_rows(table) == expected_updates(corpus)
