"""PostgresSink: rows into a PostgreSQL table, exactly once, by two-phase commit.

The dissertation's two-phase epoch commit protocol (§4.1.3) against a database that has the
two phases itself: its backend contract (§4.1, Table 4.1: Start, Pre-commit, Commit, Abort) for
an MVCC database maps onto native transactions. A sink subtask writes the rows of an epoch
inside one transaction (Start; COPY, batch by batch, as they come), and at the checkpoint's
barrier (the pre-commit) takes it to `PREPARE TRANSACTION`. A prepared transaction survives the
writer's process, a crash of the server and its restart; nothing in it is visible. When the
checkpoint completes, the sink runs `COMMIT PREPARED`. The transaction id carries job, subtask
and checkpoint (`epochal:<job>:<subtask>:<checkpoint>`), so after a failure the restored
subtasks commit the prepared transactions their checkpoint holds (pending commits re-issued at
rollback: §4.1, "Rollback") and roll back every other one of the job: those of checkpoints that
did not complete (Abort, `recover`).

Each transaction also records its epoch in `epochal_sink_epochs` (job, subtask, checkpoint, and
the run's lineage: `SinkWriter.set_lineage`), committed with the rows. A commit repeated after a
failure (its `COMMIT PREPARED` ran, the notice
did not finish) finds no prepared transaction and the epoch recorded, and does nothing; an epoch
written again after a restore from an older checkpoint finds its epoch recorded and is rolled
back, not prepared: the sink is idempotent per epoch (as `DeltaSink` is by Delta's txn ids;
the dissertation's idempotent sinks, §4.5, hold for replays that repeat an epoch's records, as
the job master's replay at the cut after a fallback does). An epoch recorded under another
lineage is another run's that took the same id (a savepoint restored into a new checkpoint
directory, whose ids begin again): its record is replaced, and the epoch written.

Upserts (`key=...`) COPY the epoch's rows into a staging table inside the prepared transaction,
and merge them into the target (`INSERT ... ON CONFLICT (key) DO UPDATE`, the last row of each
key in the epoch) in one transaction right after `COMMIT PREPARED`. Not inside the prepared one:
a prepared transaction keeps its row locks until it is committed, and the commit runs on the
same task thread, so the next epoch's upsert of a key the previous epoch wrote would wait on it
forever. The merge is idempotent (it consumes the staged rows it merges), and a restore merges
what a failure left staged.
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Callable, Sequence
from typing import Any, Literal, cast

from ...api.connector import Sink, SinkWriter
from ...errors import CheckpointError, EpochalError
from ...runtime.fault_points import fault_point
from ...validation import check_choice
from ..extras import require
from .connection import connect, first_line, is_disconnect, quote_name, server_name, split_name
from .writer import PREFIX, SEQ, TXN, PostgresWriter, PreparedEpoch, parse_transaction_id, staging_subtask

log = logging.getLogger(__name__)

PostgresSinkMode = Literal["error", "overwrite", "append"]
MODES: tuple[PostgresSinkMode, ...] = ("error", "overwrite", "append")
SinkOnError = Literal["fail", "skip", "dead_letter"]
EPOCHS = "epochal_sink_epochs"
DEAD_LETTERS = "epochal_dead_letters"


class PostgresSink(Sink):
    """Writes rows into a PostgreSQL table, exactly once (with psycopg 3: `pip install epochal[postgres]`).

    Args:
        dsn: a libpq connection string or URI (`"host=... dbname=..."`, `"postgresql://..."`).
        table: the target table, `name` or `schema.name`; it must exist.
        key: None (default) appends every row. A column (or several) with a unique index or
            primary key upserts: one row per key, the last written in an epoch wins
            (`INSERT ... ON CONFLICT (key) DO UPDATE`). Route a key to one sink subtask (sink a
            keyed stream), or two subtasks may write it in either order.
        columns: the table's columns the records fill, in record order (default: all of them).
        job: the name of the job writing the table, part of every transaction id and of the
            epochs recorded in `epochal_sink_epochs`; default: the table's name. Two jobs that
            write one table need two names.
        mode: what a job that does not resume from a checkpoint does with a table that holds
            rows: `"error"` (default) refuses to start, `"overwrite"` deletes them, `"append"`
            writes beside them. A fresh start also rolls back the job's prepared transactions
            and forgets its recorded epochs.
        on_error: a row the server refuses (a constraint, a value of the wrong type):
            `"fail"` (default) fails the job naming the row; `"skip"` drops it (logged once);
            `"dead_letter"` stores it in `epochal_dead_letters` (job, subtask, record as JSON,
            error) in the same transaction, so exactly once.
        connect_timeout: seconds to wait for a server that cannot be reached (restarting).

    Rows appear when the checkpoint that covers them completes, in one transaction per sink
    subtask and checkpoint. The server needs `max_prepared_transactions` > 0.
    """

    def __init__(
        self,
        dsn: str,
        table: str,
        *,
        key: str | Sequence[str] | None = None,
        columns: Sequence[str] | None = None,
        job: str | None = None,
        mode: PostgresSinkMode = "error",
        on_error: SinkOnError = "fail",
        connect_timeout: float = 60.0,
    ) -> None:
        require("psycopg", "PostgresSink")  # one line, before Spark starts, if the extra is missing
        self.dsn = str(dsn)
        quote_name(table)
        self.table = table
        keys = [key] if isinstance(key, str) else list(key or [])
        if not all(isinstance(k, str) and k for k in keys):
            raise ValueError(f"key must be a column name or a list of them, got {key!r}")
        self.key: list[str] = keys
        self.columns = None if columns is None else [str(c) for c in columns]
        self.job = job or table
        if ":" in self.job or "'" in self.job or len(self.job) > 150:
            raise ValueError(f"job must be a name without ':' or quotes, of at most 150 characters, got {self.job!r}")
        self.mode = cast(PostgresSinkMode, check_choice("mode", mode, MODES))
        self.on_error = cast(SinkOnError, check_choice("on_error", on_error, ("fail", "skip", "dead_letter")))
        self.connect_timeout = float(connect_timeout)
        self.who = f"PostgresSink({table})"
        self._columns: list[str] | None = None
        self._conn: Any = None
        self._lock: threading.Lock | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_conn": None, "_lock": None}

    @property
    def psycopg(self) -> Any:
        from .connection import psycopg_module

        return psycopg_module()

    # -- names ------------------------------------------------------------------------------------
    def _in_schema(self, name: str) -> str:
        schema, _ = split_name(self.table)
        return quote_name(f"{schema}.{name}")

    def epochs(self) -> str:
        return self._in_schema(EPOCHS)

    def dead_letters(self) -> str:
        return self._in_schema(DEAD_LETTERS)

    def staging(self) -> str:
        return self._in_schema(f"_epochal_stage_{split_name(self.table)[1]}"[:63])

    def copy_target(self, columns: Sequence[str]) -> str:
        return f"{quote_name(self.table)} ({', '.join(quote_name(c) for c in columns)})"

    def staging_target(self) -> str:
        return f"{self.staging()} ({', '.join(quote_name(c) for c in [*self.target_columns(), TXN, SEQ])})"

    # -- the driver's side -----------------------------------------------------------------------
    def target_columns(self) -> list[str]:
        """The columns rows fill: `columns`, else the table's (looked up once per process)."""
        if self._columns is None:
            if self.columns is not None:
                self._columns = self.columns
            else:
                schema, table = split_name(self.table)
                with connect(self.dsn, self.who, autocommit=True, wait=self.connect_timeout) as conn:
                    found = conn.execute(
                        "SELECT column_name FROM information_schema.columns WHERE table_schema = %s AND table_name = %s"
                        " AND is_generated = 'NEVER' ORDER BY ordinal_position", (schema, table)).fetchall()
                if not found:
                    raise EpochalError(f"{self.who}: no table {self.table} at {server_name(self.dsn)}; create it first")
                self._columns = [r[0] for r in found]
        return self._columns

    def check(self, resuming: bool) -> None:
        """Fail now if the server, the table or prepared transactions are missing; create the
        epochs table (and the staging table of upserts); on a fresh start, roll back the job's
        prepared transactions, forget its epochs, and apply `mode`."""
        columns = self.target_columns()
        missing = [k for k in self.key if k not in columns]
        if missing:
            raise EpochalError(f"{self.who}: key {missing} is not among the columns {columns}")
        with connect(self.dsn, self.who, autocommit=True, wait=self.connect_timeout) as conn:
            if int(conn.execute("SHOW max_prepared_transactions").fetchone()[0]) == 0:  # type: ignore[index]
                raise EpochalError(f"{self.who}: the server {server_name(self.dsn)} has max_prepared_transactions "
                                   "= 0; set it above the number of sink subtasks (it needs a restart)")
            conn.execute(f"CREATE TABLE IF NOT EXISTS {self.epochs()} (job text, subtask int, checkpoint_id bigint, "
                         "rows bigint, committed_at timestamptz DEFAULT now(), lineage text, "
                         "PRIMARY KEY (job, subtask, checkpoint_id))")
            self._add_lineage(conn)
            if self.on_error == "dead_letter":
                conn.execute(f"CREATE TABLE IF NOT EXISTS {self.dead_letters()} (job text, subtask int, record jsonb, "
                             "error text, written_at timestamptz DEFAULT now())")
            if self.key:  # a logged table: a server crash keeps the staged rows of prepared transactions
                conn.execute(f"CREATE TABLE IF NOT EXISTS {self.staging()} (LIKE {quote_name(self.table)}, "
                             f"{TXN} text, {SEQ} bigint)")
            if resuming:
                return
            for gid, _, _ in self._prepared(conn):
                conn.execute(f"ROLLBACK PREPARED '{gid}'")
            conn.execute(f"DELETE FROM {self.epochs()} WHERE job = %s", (self.job,))
            if self.key:
                conn.execute(f"DELETE FROM {self.staging()} WHERE {TXN} LIKE %s", (f"{PREFIX}:{self.job}:%",))
            if self.mode == "append":
                return
            has_rows = conn.execute(f"SELECT EXISTS (SELECT 1 FROM {quote_name(self.table)})").fetchone()[0]  # type: ignore[index]
            if has_rows and self.mode == "error":
                raise EpochalError(
                    f"{self.who}: the table holds rows; resume the run that wrote them with "
                    'from_checkpoint="latest" (epochal run --from-checkpoint latest), or pass '
                    'PostgresSink(..., mode="overwrite") to delete them or mode="append" to write beside them')
            if has_rows:
                conn.execute(f"DELETE FROM {quote_name(self.table)}")
                log.info("%s: deleted the table's rows (mode='overwrite')", self.who)

    def _add_lineage(self, conn: Any) -> None:
        """An epochs table made before lineages gets the column (only then: ALTER TABLE waits
        for the prepared transactions that wrote into the table to end)."""
        schema, _ = split_name(self.table)
        if conn.execute("SELECT 1 FROM information_schema.columns WHERE table_schema = %s AND table_name = %s "
                        "AND column_name = 'lineage'", (schema, EPOCHS)).fetchone() is not None:
            return
        try:
            with conn.transaction():
                conn.execute("SET LOCAL lock_timeout = '10s'")
                conn.execute(f"ALTER TABLE {self.epochs()} ADD COLUMN IF NOT EXISTS lineage text")
        except self.psycopg.errors.LockNotAvailable:
            raise EpochalError(f"{self.who}: {EPOCHS} needs a column lineage (text), and prepared transactions hold "
                               "it; commit or roll them back (pg_prepared_xacts), or add the column") from None

    def _prepared(self, conn: Any) -> list[tuple[str, int, int]]:
        """(gid, subtask, checkpoint) of the job's prepared transactions in this database."""
        rows = conn.execute("SELECT gid FROM pg_prepared_xacts WHERE database = current_database() AND gid LIKE %s",
                            (f"{PREFIX}:{self.job}:%",)).fetchall()
        out = []
        for (gid,) in rows:
            parsed = parse_transaction_id(gid, self.job)
            if parsed is not None:
                out.append((gid, *parsed))
        return out

    # -- the task's side -------------------------------------------------------------------------
    def create_writer(self, subtask: int, parallelism: int) -> SinkWriter:
        writer = PostgresWriter(self, subtask)
        writer.sink_parallelism = parallelism
        return writer

    def _committer(self) -> Any:
        if self._conn is None or self._conn.closed:
            self._conn = connect(self.dsn, self.who, autocommit=True, wait=self.connect_timeout)
        return self._conn

    def commit(self, committables: list[Any]) -> None:
        if self._lock is None:
            self._lock = threading.Lock()
        with self._lock:
            for prepared in sorted(committables, key=lambda c: (c.checkpoint_id, c.subtask)):
                self._again_if_lost(functools.partial(self._commit_one, prepared), "committing")

    def _again_if_lost(self, action: Callable[[], None], doing: str) -> None:
        """Run `action` on the committing connection; once more on a new one if the old one
        was lost (a server restarted since it was made): each action is idempotent."""
        for attempt in range(2):
            try:
                action()
                return
            except Exception as exc:
                if not is_disconnect(exc):
                    raise
                self._conn = None
                if attempt:
                    raise EpochalError(f"{self.who}: lost the server {server_name(self.dsn)} while {doing} "
                                       f"({first_line(exc)}); the restored job does it again") from exc
                log.warning("%s: lost the server while %s (%s); again on a new connection", self.who, doing,
                            first_line(exc))

    def _commit_one(self, prepared: PreparedEpoch) -> None:
        conn = self._committer()
        try:
            conn.execute(f"COMMIT PREPARED '{prepared.gid}'")
        except self.psycopg.errors.UndefinedObject:  # committed before, or rolled back by someone
            done = conn.execute(f"SELECT 1 FROM {self.epochs()} WHERE job = %s AND subtask = %s AND checkpoint_id = %s",
                                (self.job, prepared.subtask, prepared.checkpoint_id)).fetchone()
            if done is None:
                raise CheckpointError(f"{self.who}: prepared transaction {prepared.gid} of a complete checkpoint "
                                      "is gone and was never committed (rolled back by hand?); its "
                                      f"{prepared.rows} rows are lost") from None
        fault_point("postgres_sink.committed")  # tests: die with COMMIT PREPARED done, the merge and notice not
        if prepared.staged is not None:
            self.merge(conn, prepared.staged)

    def merge(self, conn: Any, staged: str) -> None:
        """Upsert the staged rows `staged` of a committed transaction into the table, in one
        transaction that consumes them (so running it twice merges once)."""
        columns = self.target_columns()
        cols = ", ".join(quote_name(c) for c in columns)
        keys = ", ".join(quote_name(k) for k in self.key)
        others = [c for c in columns if c not in self.key]
        action = ("DO UPDATE SET " + ", ".join(f"{quote_name(c)} = EXCLUDED.{quote_name(c)}" for c in others)
                  if others else "DO NOTHING")
        with conn.transaction():
            conn.execute(
                f"INSERT INTO {quote_name(self.table)} ({cols}) SELECT DISTINCT ON ({keys}) {cols} FROM "
                f"{self.staging()} WHERE {TXN} = %s ORDER BY {keys}, {SEQ} DESC ON CONFLICT ({keys}) {action}",
                (staged,))
            conn.execute(f"DELETE FROM {self.staging()} WHERE {TXN} = %s", (staged,))

    def roll_back_others(self, subtask: int, parallelism: int) -> None:
        """After a restore (the checkpoint's own transactions committed by now): roll back the
        job's prepared transactions of old subtasks that map to `subtask`, checkpoints that did
        not complete; merge staged rows left by a commit cut short."""
        self._again_if_lost(lambda: self._roll_back_others(subtask, parallelism), "recovering")

    def _roll_back_others(self, subtask: int, parallelism: int) -> None:
        conn = self._committer()
        for gid, old, checkpoint_id in self._prepared(conn):
            if old % parallelism == subtask:
                conn.execute(f"ROLLBACK PREPARED '{gid}'")
                log.info("%s: rolled back %s (checkpoint %d did not complete)", self.who, gid, checkpoint_id)
        if self.key:
            left = conn.execute(f"SELECT DISTINCT {TXN} FROM {self.staging()} WHERE {TXN} LIKE %s",
                                (f"{PREFIX}:{self.job}:%",)).fetchall()
            for (staged,) in left:  # visible, so committed: a commit cut short before its merge
                owner = staging_subtask(staged, self.job)
                if owner is not None and owner % parallelism == subtask:
                    self.merge(conn, staged)
