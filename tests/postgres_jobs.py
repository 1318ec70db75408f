"""The PostgreSQL jobs the fault tests run (importable by Spark workers, shipped by value): a
table's changes (PostgresCdcSource) copied into another table (PostgresSink, appends) and
counted per group into a third (upserts), and the changes that job must commit exactly."""

from __future__ import annotations

import random
import time
from typing import Any

import psycopg

from epochal import CheckpointConfig, RestartStrategy, StreamEnvironment
from epochal.connectors import PostgresCdcSource, PostgresSink

GROUPS = 7


def fill_source_table(dsn: str, slot: str = "fault", transactions: int = 300, seed: int = 5) -> None:
    """The source table, its slot (so every change below is in it), and changes in many
    transactions: inserts, updates of some rows, deletes of a few."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE src (id int PRIMARY KEY, v text)")
        conn.execute("CREATE TABLE dst (op text, id int, v text)")
        conn.execute("CREATE TABLE totals (g int PRIMARY KEY, n bigint)")
    PostgresCdcSource(dsn, "src", slot=slot).check()
    rng = random.Random(seed)
    with psycopg.connect(dsn, autocommit=True) as conn:
        next_id = 0
        for _ in range(transactions):
            with conn.transaction():
                for _ in range(rng.randrange(1, 20)):
                    conn.execute("INSERT INTO src VALUES (%s, %s)", (next_id, f"v{next_id}"))
                    next_id += 1
                if next_id > 10 and rng.random() < 0.3:
                    conn.execute("UPDATE src SET v = v || '+' WHERE id = %s", (rng.randrange(next_id),))
                if next_id > 10 and rng.random() < 0.1:
                    conn.execute("DELETE FROM src WHERE id = %s", (rng.randrange(next_id),))


def expected_changes(dsn: str, slot: str = "fault") -> list[tuple[str, int, str | None]]:
    """Every change in the slot, read on the side (a bounded source read in this process)."""
    source = PostgresCdcSource(dsn, "src", slot=slot, bounded=True)
    out: list[tuple[str, int, str | None]] = []
    reader = source.open_split(source.splits()[0], None)
    while (batch := reader.read(10_000)) is not None:
        if not isinstance(batch, list):
            out.extend(zip(batch.column("op").to_pylist(), batch.column("id").to_pylist(),
                           batch.column("v").to_pylist()))
    reader.close()
    return sorted(out, key=repr)


def expected_totals(changes: list[tuple[str, int, str | None]]) -> list[tuple[int, int]]:
    counts: dict[int, int] = {}
    for _, ident, _ in changes:
        counts[ident % GROUPS] = counts.get(ident % GROUPS, 0) + 1
    return sorted(counts.items())


def committed(dsn: str) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    """What the job committed: the copied changes and the totals, read with psycopg."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute("SELECT op, id, v FROM dst").fetchall()
        totals = conn.execute("SELECT g, n FROM totals ORDER BY g").fetchall()
    return sorted(rows, key=repr), totals


def slow(row: tuple[Any, ...]) -> tuple[str, int, str | None]:
    time.sleep(0.002)  # stretch the run so that a kill lands mid-stream
    return (row[0], row[4], row[5])  # op, (table, lsn, commit_time,) id, v


def cdc_env(dsn: str, ckpt: str, *, spark: Any = None, executor: str = "spark", slot: str = "fault",
            restarts: int = 3, bounded: bool = True) -> StreamEnvironment:
    env = StreamEnvironment(
        parallelism=2, executor=executor, spark=spark,  # type: ignore[arg-type]
        checkpoint=CheckpointConfig(interval=0.3, directory=ckpt),
        restart=RestartStrategy(max_restarts=restarts, delay=0.2), batch_size=64,
    )
    changes = env.from_source(PostgresCdcSource(dsn, "src", slot=slot, bounded=bounded, fetch_changes=500)).map(slow)
    changes.key_by(lambda c: c[1]).sink_to(PostgresSink(dsn, "dst", connect_timeout=120))
    (changes.key_by(lambda c: c[1] % GROUPS).map(lambda c: c[1] % GROUPS).key_by(lambda g: g).count()
        .sink_to(PostgresSink(dsn, "totals", key="g", connect_timeout=120)))
    return env
