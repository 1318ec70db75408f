"""PostgresSink against a real server: rows appear only when their checkpoint completes, every
row once through crashes (in-process), prepared transactions recovered by their id, replays
of committed epochs dropped, upserts, bad rows by on_error."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import psycopg
import pyarrow as pa
import pytest

from epochal import CheckpointConfig, RestartStrategy, StreamEnvironment
from epochal.cluster.inprocess import InProcessExecutor
from epochal.connectors import PostgresSink
from epochal.connectors.postgres.writer import PreparedEpoch, transaction_id
from epochal.errors import EpochalError, InjectedFailure, JobFailedError
from epochal.testing import ListSource


def sql(dsn: str, query: str, params: Any = None) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        cur = conn.execute(query, params)
        return cur.fetchall() if cur.description else []


def _env(tmp_path: Path, parallelism: int = 2, restarts: int = 3) -> StreamEnvironment:
    return StreamEnvironment(
        parallelism=parallelism,
        executor="inprocess",
        checkpoint=CheckpointConfig(interval=0.05, directory=str(tmp_path / "ckpt")),
        restart=RestartStrategy(max_restarts=restarts, delay=0.0),
        batch_size=16,
    )


def test_append_commits_each_row_once_through_crashes(pg_dsn: str, tmp_path: Path) -> None:
    sql(pg_dsn, "CREATE TABLE events (id bigint, name text, amount float8)")
    rows = [(i, f"n{i}", i / 4) for i in range(3000)]
    crashes: list[int] = []

    def crash_twice(row: tuple[int, str, float]) -> tuple[int, str, float]:
        if row[0] in (700, 2100) and row[0] not in crashes:
            crashes.append(row[0])
            raise InjectedFailure("crash")
        return row

    env = _env(tmp_path)
    env.from_source(ListSource(rows, splits=2)).map(crash_twice).sink_to(PostgresSink(pg_dsn, "events"))
    result = InProcessExecutor(seed=1, virtual_time=True).execute(env.job_graph("append"))
    assert result.restarts == 2
    assert sql(pg_dsn, "SELECT id, name, amount FROM events ORDER BY id") == rows
    assert sql(pg_dsn, "SELECT count(*) FROM pg_prepared_xacts") == [(0,)]
    epochs = sql(pg_dsn, "SELECT job, sum(rows) FROM epochal_sink_epochs GROUP BY job")
    assert epochs == [("events", 3000)]


def test_arrow_batches_with_nulls_and_types_are_copied_exactly(pg_dsn: str) -> None:
    sql(pg_dsn, "CREATE TABLE t (id int, s text, ok boolean, at timestamptz, d date, x numeric)")
    batch = pa.record_batch({
        "id": [1, 2, 3], "s": ["a,\"b\"\nc", "", None], "ok": [True, None, False],
        "at": pa.array([0, 1_500_000, None], pa.timestamp("us", tz="UTC")),
        "d": pa.array([0, 19000, None], pa.date32()), "x": [1.25, None, -3.5],
    })
    sink = PostgresSink(pg_dsn, "t")
    sink.check(resuming=False)
    writer = sink.create_writer(0, 1)
    writer.write(batch)
    sink.commit([writer.prepare_commit(1)])
    got = sql(pg_dsn, "SELECT id, s, ok, extract(epoch from at), d::text, x::text FROM t ORDER BY id")
    assert got == [(1, 'a,"b"\nc', True, 0, "1970-01-01", "1.25"), (2, "", None, 1.5, "2022-01-08", None),
                   (3, None, False, None, None, "-3.5")]


def test_nothing_is_visible_before_the_checkpoint_completes(pg_dsn: str) -> None:
    sql(pg_dsn, "CREATE TABLE t (id int)")
    sink = PostgresSink(pg_dsn, "t")
    sink.check(resuming=False)
    writer = sink.create_writer(0, 1)
    writer.write([(1,), (2,)])
    prepared = writer.prepare_commit(7)
    assert prepared == PreparedEpoch(transaction_id("t", 0, 7), 0, 7, 2)
    assert sql(pg_dsn, "SELECT count(*) FROM t") == [(0,)]
    assert sql(pg_dsn, "SELECT gid FROM pg_prepared_xacts") == [("epochal:t:0:7",)]
    writer.write([(3,)])  # the next epoch, while 7 is prepared
    sink.commit([prepared])
    sink.commit([prepared])  # again, as after a failure cut the notice short: nothing more
    assert sql(pg_dsn, "SELECT id FROM t ORDER BY id") == [(1,), (2,)]
    writer.close()


def test_a_restore_commits_its_checkpoint_and_rolls_back_the_rest(pg_dsn: str) -> None:
    sql(pg_dsn, "CREATE TABLE t (id int)")
    sink = PostgresSink(pg_dsn, "t", job="j")
    sink.check(resuming=False)
    old = [sink.create_writer(s, 3) for s in range(3)]
    committables = []
    for s, w in enumerate(old):
        w.write([(s * 10 + 1,)])
        committables.append(w.prepare_commit(4))  # checkpoint 4 completes, never notified
        w.write([(s * 10 + 2,)])
        w.prepare_commit(5)  # checkpoint 5 never completes
    for w in old:
        w.close()  # the attempt dies
    assert len(sql(pg_dsn, "SELECT gid FROM pg_prepared_xacts")) == 6
    sink.check(resuming=True)
    new = [sink.create_writer(s, 2) for s in range(2)]  # restored at parallelism 2: 0 takes old 0 and 2
    sink.commit([c for c in committables if c.subtask % 2 == 0])
    new[0].recover()
    sink.commit([c for c in committables if c.subtask % 2 == 1])
    new[1].recover()
    assert sql(pg_dsn, "SELECT id FROM t ORDER BY id") == [(1,), (11,), (21,)]
    assert sql(pg_dsn, "SELECT count(*) FROM pg_prepared_xacts") == [(0,)]
    new[0].write([(99,)])  # epoch 5 again: new rows, the same id as the one rolled back
    sink.commit([new[0].prepare_commit(5)])
    assert sql(pg_dsn, "SELECT id FROM t ORDER BY id") == [(1,), (11,), (21,), (99,)]


def test_an_epoch_is_recognised_by_its_lineage_another_run_s_epoch_of_that_id_is_written(pg_dsn: str) -> None:
    """Idempotent per epoch under lineages (`SinkWriter.set_lineage`): the same run's replay is
    dropped; a run of another lineage (a savepoint restored into a new directory, whose ids
    begin again) writes its epoch of that id, and the record becomes its."""
    sql(pg_dsn, "CREATE TABLE t (id int)")
    sink = PostgresSink(pg_dsn, "t")
    sink.check(resuming=False)
    first = sink.create_writer(0, 1)
    first.set_lineage("aaaaaaaaaaaaaaaa")
    first.write([(1,)])
    sink.commit([first.prepare_commit(3)])
    first.write([(1,)])  # the same run's epoch 3, replayed at its cut
    assert first.prepare_commit(3) is None
    first.close()
    sink.check(resuming=True)
    fork = sink.create_writer(0, 1)
    fork.set_lineage("bbbbbbbbbbbbbbbb")
    fork.write([(2,)])  # another run's epoch 3
    sink.commit([fork.prepare_commit(3)])
    assert sql(pg_dsn, "SELECT id FROM t ORDER BY id") == [(1,), (2,)]
    assert sql(pg_dsn, "SELECT checkpoint_id, lineage FROM epochal_sink_epochs") == [(3, "bbbbbbbbbbbbbbbb")]
    fork.write([(2,)])  # and its replay is dropped
    assert fork.prepare_commit(3) is None
    fork.close()


def test_an_epochs_table_of_before_lineages_gets_the_column_and_its_epochs_still_count(pg_dsn: str) -> None:
    sql(pg_dsn, "CREATE TABLE t (id int)")
    sql(pg_dsn, "CREATE TABLE epochal_sink_epochs (job text, subtask int, checkpoint_id bigint, rows bigint, "
                "committed_at timestamptz DEFAULT now(), PRIMARY KEY (job, subtask, checkpoint_id))")
    sql(pg_dsn, "INSERT INTO epochal_sink_epochs (job, subtask, checkpoint_id, rows) VALUES ('t', 0, 3, 1)")
    sink = PostgresSink(pg_dsn, "t")
    sink.check(resuming=True)
    writer = sink.create_writer(0, 1)
    writer.set_lineage("cccccccccccccccc")
    writer.write([(1,)])
    assert writer.prepare_commit(3) is None  # recorded before lineages: taken as this run's
    writer.write([(2,)])
    sink.commit([writer.prepare_commit(4)])
    assert sql(pg_dsn, "SELECT checkpoint_id, lineage FROM epochal_sink_epochs ORDER BY 1") == [
        (3, None), (4, "cccccccccccccccc")]
    writer.close()


def test_a_replayed_epoch_that_was_committed_is_dropped(pg_dsn: str) -> None:
    sql(pg_dsn, "CREATE TABLE t (id int)")
    sink = PostgresSink(pg_dsn, "t")
    sink.check(resuming=False)
    writer = sink.create_writer(0, 1)
    writer.write([(1,)])
    sink.commit([writer.prepare_commit(3)])
    writer.write([(1,)])  # the same epoch written again (a restore from an older checkpoint)
    assert writer.prepare_commit(3) is None
    assert sql(pg_dsn, "SELECT id FROM t") == [(1,)]


def test_a_fresh_start_refuses_a_table_with_rows_unless_told(pg_dsn: str) -> None:
    sql(pg_dsn, "CREATE TABLE t (id int); INSERT INTO t VALUES (1)")
    with pytest.raises(EpochalError, match="holds rows"):
        PostgresSink(pg_dsn, "t").check(resuming=False)
    PostgresSink(pg_dsn, "t", mode="append").check(resuming=False)
    assert sql(pg_dsn, "SELECT count(*) FROM t") == [(1,)]
    PostgresSink(pg_dsn, "t", mode="overwrite").check(resuming=False)
    assert sql(pg_dsn, "SELECT count(*) FROM t") == [(0,)]
    with pytest.raises(EpochalError, match="no table nope"):
        PostgresSink(pg_dsn, "nope").check(resuming=False)


def test_upserts_keep_the_last_row_per_key_through_crashes(pg_dsn: str, tmp_path: Path) -> None:
    sql(pg_dsn, "CREATE TABLE totals (k text PRIMARY KEY, n bigint)")
    rng = random.Random(3)
    words = [f"w{rng.randrange(40)}" for _ in range(2000)]
    crashed: list[int] = []

    def crash_once(pair: tuple[str, int]) -> tuple[str, int]:
        if len(crashed) < 2 and rng.random() < 0.002:
            crashed.append(1)
            raise InjectedFailure("crash")
        return pair

    env = _env(tmp_path)
    (env.from_source(ListSource(words, splits=2)).key_by(lambda w: w).count().map(crash_once)
        .key_by(lambda p: p[0]).sink_to(PostgresSink(pg_dsn, "totals", key="k")))
    result = InProcessExecutor(seed=2, virtual_time=True).execute(env.job_graph("upsert"))
    assert result.restarts == len(crashed) >= 1
    want = sorted((w, words.count(w)) for w in set(words))
    assert sql(pg_dsn, "SELECT k, n FROM totals ORDER BY k") == want
    assert sql(pg_dsn, "SELECT count(*) FROM _epochal_stage_totals") == [(0,)]


@pytest.mark.parametrize("on_error", ["fail", "skip", "dead_letter"])
def test_rows_the_server_refuses_follow_on_error(pg_dsn: str, tmp_path: Path, on_error: str) -> None:
    sql(pg_dsn, "CREATE TABLE t (id int NOT NULL CHECK (id <> 13), s text)")
    rows = [(i, f"s{i}") for i in range(40)] + [(None, "null id")]
    env = _env(tmp_path, parallelism=1, restarts=0)
    env.from_source(ListSource(rows)).sink_to(PostgresSink(pg_dsn, "t", on_error=on_error))  # type: ignore[arg-type]
    if on_error == "fail":
        with pytest.raises(JobFailedError, match=r"refused a row .*\{'id': 13, 's': 's13'\}"):
            env.execute("bad")
        return
    env.execute("bad")
    assert sql(pg_dsn, "SELECT id FROM t ORDER BY id") == [(i,) for i in range(40) if i != 13]
    if on_error == "dead_letter":
        letters = sql(pg_dsn, "SELECT record, error FROM epochal_dead_letters ORDER BY error")
        assert [r for r, _ in letters] == [{"id": 13, "s": "s13"}, {"id": None, "s": "null id"}]
        assert "check constraint" in letters[0][1] and "null value" in letters[1][1]

