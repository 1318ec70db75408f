"""PostgresCdcSource against a real server: pgoutput decoded into typed changelog batches, a
restore resumes at its (lsn, rows) position, the slot moves only when a checkpoint completes,
a job through crashes reads each change once, bad values follow on_error."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import psycopg
import pytest

from epochal import CheckpointConfig, RestartStrategy, StreamEnvironment
from epochal.cluster.inprocess import InProcessExecutor
from epochal.connectors import PostgresCdcSource
from epochal.connectors.postgres.pgoutput import parse_lsn
from epochal.errors import InjectedFailure
from epochal.testing import CollectSink


def sql(dsn: str, query: str, params: Any = None) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        cur = conn.execute(query, params)
        return cur.fetchall() if cur.description else []


def read_all(source: PostgresCdcSource, batch: int = 1000, reopen: bool = False) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for split in source.splits():
        reader = source.open_split(split, None)
        while (got := reader.read(batch)) is not None:
            if not isinstance(got, list):
                rows.extend(got.to_pylist())
            if reopen:
                position = reader.position()
                reader.close()
                reader = source.open_split(split, position)
        reader.close()
    return rows


def read_some(reader: Any) -> Any:
    """The next batch of an unbounded reader, polled as a task would (a commit may take a
    moment to be flushed and decodable)."""
    deadline = time.monotonic() + 30
    while isinstance(got := reader.read(100), list) and not got:
        assert time.monotonic() < deadline, "no change came"
        time.sleep(reader.retry_after())
    return got


def _slot_lsn(dsn: str, slot: str) -> int:
    return parse_lsn(sql(dsn, "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = %s",
                         (slot,))[0][0])


def test_inserts_updates_deletes_and_truncates_come_as_typed_changes(pg_dsn: str) -> None:
    sql(pg_dsn, "CREATE TABLE t (id int PRIMARY KEY, name text, score float8, ok boolean, at timestamptz, "
                "d date, big bigint, price numeric, raw bytea)")
    PostgresCdcSource(pg_dsn, "t", slot="s1").check()
    sql(pg_dsn, "INSERT INTO t VALUES (1, 'a', 1.5, true, '2024-01-02 03:04:05.678+00', '2024-01-02', 9000000000, "
                "12.50, '\\x0102'), (2, NULL, 'Infinity', NULL, NULL, NULL, NULL, NULL, NULL)")
    sql(pg_dsn, "UPDATE t SET name = 'z' WHERE id = 1")
    sql(pg_dsn, "UPDATE t SET id = 3 WHERE id = 2")  # the key changes: the old key is deleted
    sql(pg_dsn, "DELETE FROM t WHERE id = 1")
    sql(pg_dsn, "TRUNCATE t")
    rows = read_all(PostgresCdcSource(pg_dsn, "t", slot="s1", bounded=True))
    assert [(r["op"], r["id"], r["name"]) for r in rows] == [
        ("insert", 1, "a"), ("insert", 2, None), ("update", 1, "z"), ("delete", 2, None), ("update", 3, None),
        ("delete", 1, None), ("truncate", None, None)]
    first = rows[0]
    assert first["table"] == "public.t" and first["score"] == 1.5 and first["ok"] is True
    assert first["at"].isoformat() == "2024-01-02T03:04:05.678000+00:00"
    assert str(first["d"]) == "2024-01-02" and first["big"] == 9_000_000_000 and first["price"] == "12.50"
    assert first["raw"] == b"\x01\x02" and rows[1]["score"] == float("inf")
    assert all(r["lsn"] > 0 and r["commit_time"] is not None for r in rows)
    lsns = [r["lsn"] for r in rows]
    assert lsns == sorted(lsns) and lsns[0] == lsns[1]  # one transaction, one lsn


def test_a_reader_reopened_at_its_position_resumes_inside_a_transaction(pg_dsn: str) -> None:
    sql(pg_dsn, "CREATE TABLE t (id int PRIMARY KEY)")
    PostgresCdcSource(pg_dsn, "t", slot="s2").check()
    sql(pg_dsn, "INSERT INTO t SELECT generate_series(1, 50)")
    for i in range(51, 71):
        sql(pg_dsn, "INSERT INTO t VALUES (%s)", (i,))
    source = PostgresCdcSource(pg_dsn, "t", slot="s2", bounded=True)
    assert [r["id"] for r in read_all(source, batch=7, reopen=True)] == list(range(1, 71))


def test_the_slot_advances_only_when_a_checkpoint_completes(pg_dsn: str) -> None:
    sql(pg_dsn, "CREATE TABLE t (id int PRIMARY KEY)")
    source = PostgresCdcSource(pg_dsn, "t", slot="s3")
    source.check()
    before = _slot_lsn(pg_dsn, "s3")
    sql(pg_dsn, "INSERT INTO t SELECT generate_series(1, 10)")
    reader = source.open_split(source.splits()[0], None)
    got = read_some(reader)
    assert got.num_rows == 10
    position = reader.position()
    assert _slot_lsn(pg_dsn, "s3") == before  # read, not acknowledged
    reader.notify_checkpoint_complete(1, position)
    assert _slot_lsn(pg_dsn, "s3") == position[0] > before
    reader.close()
    again = source.open_split(source.splits()[0], position)
    sql(pg_dsn, "INSERT INTO t VALUES (11)")
    assert read_some(again).column("id").to_pylist() == [11]
    again.close()


def test_a_job_reads_every_change_once_through_crashes(pg_dsn: str, tmp_path: Path) -> None:
    sql(pg_dsn, "CREATE TABLE a (id int PRIMARY KEY, v text); CREATE TABLE b (id int PRIMARY KEY, v text)")
    source_check = PostgresCdcSource(pg_dsn, ["a", "b"], slot="s4")
    source_check.check()
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        for i in range(300):
            with conn.transaction():  # one transaction across both tables, both splits
                conn.execute("INSERT INTO a VALUES (%s, %s)", (i, f"a{i}"))
                conn.execute("INSERT INTO b VALUES (%s, %s)", (i, f"b{i}"))
            if i % 3 == 0:
                conn.execute("UPDATE a SET v = v || '!' WHERE id = %s", (i,))
    crashed: list[int] = []

    def crash(row: tuple[Any, ...]) -> tuple[Any, ...]:
        if row[2] in (100, 250) and row[0] == "insert" and row[2] not in crashed:
            crashed.append(row[2])
            raise InjectedFailure("crash")
        return row

    env = StreamEnvironment(parallelism=2, checkpoint=CheckpointConfig(interval=0.05, directory=str(tmp_path / "c")),
                            restart=RestartStrategy(max_restarts=3, delay=0.0), batch_size=20)
    sink = CollectSink()
    (env.from_source(PostgresCdcSource(pg_dsn, ["a", "b"], slot="s4", bounded=True, fetch_changes=50))
        .map(lambda r: (r[0], r[1], r[4], r[5])).map(crash).sink_to(sink))  # op, table, (lsn, time,) id, v
    result = InProcessExecutor(seed=4, virtual_time=True).execute(env.job_graph("cdc"))
    assert result.restarts == 2
    want = sorted([("insert", "public.a", i, f"a{i}") for i in range(300)]
                  + [("insert", "public.b", i, f"b{i}") for i in range(300)]
                  + [("update", "public.a", i, f"a{i}!") for i in range(0, 300, 3)])
    assert sorted(sink.committed()) == want


@pytest.mark.parametrize("on_error", ["fail", "skip"])
def test_a_value_that_does_not_convert_follows_on_error(pg_dsn: str, on_error: str) -> None:
    sql(pg_dsn, "CREATE TABLE t (id int PRIMARY KEY, at timestamp)")
    PostgresCdcSource(pg_dsn, "t", slot="s5").check()
    sql(pg_dsn, "INSERT INTO t VALUES (1, '2024-01-01'), (2, 'infinity'), (3, '2024-01-03')")
    env = StreamEnvironment(parallelism=1, executor="inprocess", restart=RestartStrategy(max_restarts=0))
    sink = CollectSink()
    env.from_source(PostgresCdcSource(pg_dsn, "t", slot="s5", bounded=True), on_error=on_error).map(  # type: ignore[arg-type]
        lambda r: r[4]).sink_to(sink)
    if on_error == "fail":
        with pytest.raises(Exception, match=r"public.t at .* does not convert: column 'at': 'infinity'"):
            env.execute("bad")
        return
    env.execute("bad")
    assert sink.committed() == [1, 3]


def test_a_toasted_value_an_update_left_alone_comes_as_null(pg_dsn: str) -> None:
    sql(pg_dsn, "CREATE TABLE t (id int PRIMARY KEY, big text, n int); ALTER TABLE t ALTER big SET STORAGE EXTERNAL")
    PostgresCdcSource(pg_dsn, "t", slot="s6").check()
    sql(pg_dsn, "INSERT INTO t VALUES (1, repeat('x', 10000), 0)")
    sql(pg_dsn, "UPDATE t SET n = 1 WHERE id = 1")  # big is not sent: pgoutput marks it unchanged
    rows = read_all(PostgresCdcSource(pg_dsn, "t", slot="s6", bounded=True))
    assert [(r["op"], r["n"], None if r["big"] is None else len(r["big"])) for r in rows] == [
        ("insert", 0, 10000), ("update", 1, None)]
