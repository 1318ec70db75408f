"""PostgresSink: rows into a PostgreSQL table, exactly once, by two-phase commit.

The dissertation's two-phase epoch commit (§4.1.3) against a database that has the two phases
itself: a sink subtask writes the rows of an epoch inside one transaction (COPY, batch by
batch, as they come), and at the checkpoint's barrier (the pre-commit) takes it to `PREPARE
TRANSACTION`. A prepared transaction survives the writer's process, a crash of the server and
its restart; nothing in it is visible. When the checkpoint completes, the sink runs `COMMIT
PREPARED`. The transaction id carries job, subtask and checkpoint
(`epochal:<job>:<subtask>:<checkpoint>`), so after a failure the restored subtasks commit the
prepared transactions their checkpoint holds and roll back every other one of the job: those of
checkpoints that did not complete (`recover`).

Each transaction also records its epoch in `epochal_sink_epochs` (job, subtask, checkpoint),
committed with the rows. A commit repeated after a failure (its `COMMIT PREPARED` ran, the notice
did not finish) finds no prepared transaction and the epoch recorded, and does nothing; an epoch
written again after a restore from an older checkpoint finds its epoch recorded and is rolled
back, not prepared: the sink is idempotent per epoch (as `DeltaSink` is by Delta's txn ids).

Upserts (`key=...`) COPY the epoch's rows into a staging table inside the prepared transaction,
and merge them into the target (`INSERT ... ON CONFLICT (key) DO UPDATE`, the last row of each
key in the epoch) in one transaction right after `COMMIT PREPARED`. Not inside the prepared one:
a prepared transaction keeps its row locks until it is committed, and the commit runs on the
same task thread, so the next epoch's upsert of a key the previous epoch wrote would wait on it
forever. The merge is idempotent (it consumes the staged rows it merges), and a restore merges
what a failure left staged.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal, cast

import pyarrow as pa

from ...api.connector import Sink, SinkWriter
from ...config import check_choice
from ...errors import CheckpointError, EpochalError
from ...runtime.fault_points import fault_point
from ...runtime.wire.elements import Batch
from .connection import connect, first_line, is_disconnect, quote_name, server_name, split_name
from .rows import copy_rows, row_of, to_columns

log = logging.getLogger(__name__)

PostgresSinkMode = Literal["error", "overwrite", "append"]
MODES: tuple[PostgresSinkMode, ...] = ("error", "overwrite", "append")
SinkOnError = Literal["fail", "skip", "dead_letter"]
EPOCHS = "epochal_sink_epochs"
DEAD_LETTERS = "epochal_dead_letters"
_TXN, _SEQ = "_epochal_txn", "_epochal_seq"
_PREFIX = "epochal"


@dataclass(frozen=True, slots=True)
class PreparedEpoch:
    """A prepared transaction: its id, whose epoch it is, and how many rows it holds."""

    gid: str
    subtask: int
    checkpoint_id: int
    rows: int


def transaction_id(job: str, subtask: int, checkpoint_id: int) -> str:
    return f"{_PREFIX}:{job}:{subtask}:{checkpoint_id}"


def parse_transaction_id(gid: str, job: str) -> tuple[int, int] | None:
    """(subtask, checkpoint) of one of `job`'s transaction ids, else None."""
    head, _, rest = gid.partition(f"{_PREFIX}:{job}:")
    parts = rest.split(":")
    if head or len(parts) != 2 or not all(p.isdigit() for p in parts):
        return None
    return int(parts[0]), int(parts[1])


class _PostgresWriter(SinkWriter):
    def __init__(self, sink: PostgresSink, subtask: int) -> None:
        self.sink = sink
        self.subtask = subtask
        self.columns = sink.target_columns()
        self.conn = connect(sink.dsn, sink.who, autocommit=False, wait=sink.connect_timeout)
        self.rows = 0  # rows in the open transaction
        self.seq = 0
        self.skipped = 0

    def write(self, batch: Batch) -> None:
        arrow = to_columns(batch, self.columns)
        if not arrow.num_rows:
            return
        if self.sink.key:
            arrow = arrow.append_column(_TXN, pa.nulls(arrow.num_rows, pa.string())).append_column(
                _SEQ, pa.array(range(self.seq, self.seq + arrow.num_rows), pa.int64()))
            self.seq += arrow.num_rows
        try:
            self._copy(arrow)
        except Exception as exc:
            if is_disconnect(exc):
                raise EpochalError(f"{self.sink.who}: lost the server {server_name(self.sink.dsn)} in the middle "
                                   f"of an epoch ({first_line(exc)}); its rows are written again after a restart "
                                   "from the last checkpoint") from exc
            raise

    def _copy(self, arrow: pa.RecordBatch) -> None:
        target = self.sink.staging_target() if self.sink.key else self.sink.copy_target(self.columns)
        with self.conn.cursor() as cur:
            if self.sink.on_error == "fail":
                try:
                    copy_rows(cur, target, arrow)
                except (self.sink.psycopg.DataError, self.sink.psycopg.IntegrityError) as exc:
                    raise EpochalError(f"{self.sink.who}: the server refused a row ({first_line(exc)}): "
                                       f"{_bad_row(exc, arrow)}") from exc
                self.rows += arrow.num_rows
                return
            self.rows += self._copy_or_bisect(cur, target, arrow)

    def _copy_or_bisect(self, cur: Any, target: str, arrow: pa.RecordBatch) -> int:
        """COPY under a savepoint; a batch the server refuses is halved until its bad rows are
        single, and those are skipped or dead-lettered (into the same transaction: exactly once)."""
        psycopg = self.sink.psycopg
        cur.execute("SAVEPOINT epochal_batch")
        try:
            copy_rows(cur, target, arrow)
        except (psycopg.DataError, psycopg.IntegrityError) as exc:
            cur.execute("ROLLBACK TO SAVEPOINT epochal_batch")
            if arrow.num_rows > 1:
                half = arrow.num_rows // 2
                return self._copy_or_bisect(cur, target, arrow.slice(0, half)) + self._copy_or_bisect(
                    cur, target, arrow.slice(half))
            self._reject(cur, arrow, exc)
            return 0
        cur.execute("RELEASE SAVEPOINT epochal_batch")
        return arrow.num_rows

    def _reject(self, cur: Any, arrow: pa.RecordBatch, exc: BaseException) -> None:
        row = {k: v for k, v in row_of(arrow, 0).items() if k not in (_TXN, _SEQ)}
        if not self.skipped:
            log.warning("%s: a row the server refuses (%s), on_error=%r: %r", self.sink.who, first_line(exc),
                        self.sink.on_error, row)
        self.skipped += 1
        if self.sink.on_error == "dead_letter":
            from psycopg.types.json import Jsonb

            cur.execute(f"INSERT INTO {self.sink.dead_letters()} (job, subtask, record, error) VALUES (%s, %s, %s, %s)",
                        (self.sink.job, self.subtask, Jsonb(row, dumps=_dumps), first_line(exc)))
            self.rows += 1  # the transaction holds something to commit

    def prepare_commit(self, checkpoint_id: int) -> PreparedEpoch | None:
        if not self.rows:
            self.conn.rollback()
            return None
        gid = transaction_id(self.sink.job, self.subtask, checkpoint_id)
        with self.conn.cursor() as cur:
            cur.execute(f"SELECT 1 FROM {self.sink.epochs()} WHERE job = %s AND subtask = %s AND checkpoint_id = %s",
                        (self.sink.job, self.subtask, checkpoint_id))
            if cur.fetchone() is not None:  # a replay of an epoch committed already
                log.info("%s: epoch %d of subtask %d was committed already: its replay is dropped", self.sink.who,
                         checkpoint_id, self.subtask)
                self.conn.rollback()
                self.rows = self.seq = 0
                return None
            if self.sink.key:
                cur.execute(f"UPDATE {self.sink.staging()} SET {_TXN} = %s WHERE {_TXN} IS NULL", (gid,))
            cur.execute(f"INSERT INTO {self.sink.epochs()} (job, subtask, checkpoint_id, rows) VALUES (%s, %s, %s, %s)",
                        (self.sink.job, self.subtask, checkpoint_id, self.rows))
            cur.execute(f"PREPARE TRANSACTION '{gid}'")  # gid: our digits and the checked job name
        self.conn.commit()  # the session leaves the (now prepared) transaction
        prepared = PreparedEpoch(gid, self.subtask, checkpoint_id, self.rows)
        self.rows = self.seq = 0
        return prepared

    def recover(self) -> None:
        self.sink.roll_back_others(self.subtask, self.sink_parallelism)

    sink_parallelism = 1

    def close(self) -> None:
        try:
            self.conn.close()  # an open transaction is rolled back by the server
        except Exception:  # noqa: BLE001 - closing a broken connection
            pass


def _bad_row(exc: BaseException, arrow: pa.RecordBatch) -> str:
    """The row a COPY error names ('COPY t, line 3'), else the batch's size."""
    context = getattr(getattr(exc, "diag", None), "context", None) or ""
    marker = ", line "
    if marker in context:
        digits = context.split(marker, 1)[1].split(":")[0].split(",")[0].strip()
        if digits.isdigit() and 0 < int(digits) <= arrow.num_rows:
            row = {k: v for k, v in row_of(arrow, int(digits) - 1).items() if k not in (_TXN, _SEQ)}
            return repr(row)
    return f"<one of {arrow.num_rows} rows>"


def _dumps(value: Any) -> str:
    import json

    return json.dumps(value, default=str)


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
        return f"{self.staging()} ({', '.join(quote_name(c) for c in [*self.target_columns(), _TXN, _SEQ])})"

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
                         "rows bigint, committed_at timestamptz DEFAULT now(), "
                         "PRIMARY KEY (job, subtask, checkpoint_id))")
            if self.on_error == "dead_letter":
                conn.execute(f"CREATE TABLE IF NOT EXISTS {self.dead_letters()} (job text, subtask int, record jsonb, "
                             "error text, written_at timestamptz DEFAULT now())")
            if self.key:  # a logged table: a server crash keeps the staged rows of prepared transactions
                conn.execute(f"CREATE TABLE IF NOT EXISTS {self.staging()} (LIKE {quote_name(self.table)}, "
                             f"{_TXN} text, {_SEQ} bigint)")
            if resuming:
                return
            for gid, _, _ in self._prepared(conn):
                conn.execute(f"ROLLBACK PREPARED '{gid}'")
            conn.execute(f"DELETE FROM {self.epochs()} WHERE job = %s", (self.job,))
            if self.key:
                conn.execute(f"DELETE FROM {self.staging()} WHERE {_TXN} LIKE %s", (f"{_PREFIX}:{self.job}:%",))
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

    def _prepared(self, conn: Any) -> list[tuple[str, int, int]]:
        """(gid, subtask, checkpoint) of the job's prepared transactions in this database."""
        rows = conn.execute("SELECT gid FROM pg_prepared_xacts WHERE database = current_database() AND gid LIKE %s",
                            (f"{_PREFIX}:{self.job}:%",)).fetchall()
        out = []
        for (gid,) in rows:
            parsed = parse_transaction_id(gid, self.job)
            if parsed is not None:
                out.append((gid, *parsed))
        return out

    # -- the task's side -------------------------------------------------------------------------
    def create_writer(self, subtask: int, parallelism: int) -> SinkWriter:
        writer = _PostgresWriter(self, subtask)
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
            try:
                for prepared in sorted(committables, key=lambda c: (c.checkpoint_id, c.subtask)):
                    self._commit_one(prepared)
            except Exception as exc:
                if self._conn is not None and is_disconnect(exc):
                    self._conn = None
                    raise EpochalError(f"{self.who}: lost the server {server_name(self.dsn)} while committing "
                                       f"({first_line(exc)}); the restored job commits again") from exc
                raise

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
        if self.key:
            self.merge(conn, prepared.gid)

    def merge(self, conn: Any, gid: str) -> None:
        """Upsert the staged rows of committed transaction `gid` into the table, in one
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
                f"{self.staging()} WHERE {_TXN} = %s ORDER BY {keys}, {_SEQ} DESC ON CONFLICT ({keys}) {action}",
                (gid,))
            conn.execute(f"DELETE FROM {self.staging()} WHERE {_TXN} = %s", (gid,))

    def roll_back_others(self, subtask: int, parallelism: int) -> None:
        """After a restore (the checkpoint's own transactions committed by now): roll back the
        job's prepared transactions of old subtasks that map to `subtask`, checkpoints that did
        not complete; merge staged rows left by a commit cut short."""
        conn = self._committer()
        for gid, old, checkpoint_id in self._prepared(conn):
            if old % parallelism == subtask:
                conn.execute(f"ROLLBACK PREPARED '{gid}'")
                log.info("%s: rolled back %s (checkpoint %d did not complete)", self.who, gid, checkpoint_id)
        if self.key:
            left = conn.execute(f"SELECT DISTINCT {_TXN} FROM {self.staging()} WHERE {_TXN} LIKE %s",
                                (f"{_PREFIX}:{self.job}:%",)).fetchall()
            for (gid,) in left:
                parsed = parse_transaction_id(gid, self.job)
                if parsed is not None and parsed[0] % parallelism == subtask:
                    self.merge(conn, gid)
