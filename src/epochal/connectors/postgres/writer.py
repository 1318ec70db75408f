"""The writer of a PostgresSink subtask: an epoch's rows COPYed into one transaction as they
come, taken to PREPARE TRANSACTION at the checkpoint's barrier (see `postgres.sink`).

Rows the server refuses are found by halving the batch under savepoints (a COPY fails whole)
and skipped or dead-lettered in the same transaction, so a dead letter commits with its epoch.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from ...api.connector import SinkWriter
from ...errors import EpochalError
from ...runtime.wire.elements import Batch
from .connection import connect, first_line, is_disconnect, server_name
from .rows import copy_rows, row_of, to_columns

if TYPE_CHECKING:
    from .sink import PostgresSink

log = logging.getLogger(__name__)

TXN, SEQ = "_epochal_txn", "_epochal_seq"
FLUSH_ROWS = 65_536  # rows gathered before a COPY: each COPY costs a round trip and a statement
PREFIX = "epochal"


@dataclass(frozen=True, slots=True)
class PreparedEpoch:
    """A prepared transaction: its id, whose epoch it is, and how many rows it holds."""

    gid: str
    subtask: int
    checkpoint_id: int
    rows: int
    staged: str | None = None  # upserts: the id of its rows in the staging table


def transaction_id(job: str, subtask: int, checkpoint_id: int) -> str:
    return f"{PREFIX}:{job}:{subtask}:{checkpoint_id}"


def staging_id(job: str, subtask: int) -> str:
    """The id of one transaction's rows in the staging table (known before its checkpoint is)."""
    return f"{PREFIX}:{job}:{subtask}:w{uuid.uuid4().hex[:16]}"


def staging_subtask(staged: str, job: str) -> int | None:
    head, _, rest = staged.partition(f"{PREFIX}:{job}:")
    subtask, _, token = rest.partition(":")
    return int(subtask) if not head and subtask.isdigit() and token.startswith("w") else None


def parse_transaction_id(gid: str, job: str) -> tuple[int, int] | None:
    """(subtask, checkpoint) of one of `job`'s transaction ids, else None."""
    head, _, rest = gid.partition(f"{PREFIX}:{job}:")
    parts = rest.split(":")
    if head or len(parts) != 2 or not all(p.isdigit() for p in parts):
        return None
    return int(parts[0]), int(parts[1])


class PostgresWriter(SinkWriter):
    def __init__(self, sink: PostgresSink, subtask: int) -> None:
        self.sink = sink
        self.subtask = subtask
        self.columns = sink.target_columns()
        self.conn = connect(sink.dsn, sink.who, autocommit=False, wait=sink.connect_timeout)
        self.rows = 0  # rows in the open transaction
        self.seq = 0
        self.skipped = 0
        self.staged = staging_id(sink.job, subtask)
        self.lineage: str | None = None  # the run's (`set_lineage`): None matches any
        self._buffer: list[pa.RecordBatch] = []  # batches not sent yet: one COPY for many small ones
        self._buffered = 0

    def write(self, batch: Batch) -> None:
        arrow = to_columns(batch, self.columns)
        if not arrow.num_rows:
            return
        if self._buffer and not arrow.schema.equals(self._buffer[0].schema):
            self._flush()
        self._buffer.append(arrow)
        self._buffered += arrow.num_rows
        if self._buffered >= FLUSH_ROWS:
            self._flush()

    def _flush(self) -> None:
        """COPY the buffered batches, as one."""
        if not self._buffer:
            return
        batches, self._buffer, self._buffered = self._buffer, [], 0
        arrow = batches[0] if len(batches) == 1 else pa.Table.from_batches(batches).combine_chunks().to_batches()[0]
        if self.sink.key:
            n = arrow.num_rows
            arrow = arrow.append_column(TXN, pa.array([self.staged] * n, pa.string())).append_column(
                SEQ, pa.array(range(self.seq, self.seq + n), pa.int64()))
            self.seq += n
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
        row = {k: v for k, v in row_of(arrow, 0).items() if k not in (TXN, SEQ)}
        if not self.skipped:
            log.warning("%s: a row the server refuses (%s), on_error=%r: %r", self.sink.who, first_line(exc),
                        self.sink.on_error, row)
        self.skipped += 1
        if self.sink.on_error == "dead_letter":
            from psycopg.types.json import Jsonb

            cur.execute(f"INSERT INTO {self.sink.dead_letters()} (job, subtask, record, error) VALUES (%s, %s, %s, %s)",
                        (self.sink.job, self.subtask, Jsonb(row, dumps=_dumps), first_line(exc)))
            self.rows += 1  # the transaction holds something to commit

    def set_lineage(self, lineage: str) -> None:
        self.lineage = lineage

    def prepare_commit(self, checkpoint_id: int) -> PreparedEpoch | None:
        try:
            return self._prepare(checkpoint_id)
        except Exception as exc:
            if is_disconnect(exc):  # the open transaction went with the connection
                raise EpochalError(f"{self.sink.who}: lost the server {server_name(self.sink.dsn)} while preparing "
                                   f"checkpoint {checkpoint_id} ({first_line(exc)}); its rows are written again "
                                   "after a restart from the last checkpoint") from exc
            raise

    def _prepare(self, checkpoint_id: int) -> PreparedEpoch | None:
        self._flush()
        if not self.rows:
            self.conn.rollback()
            return None
        gid = transaction_id(self.sink.job, self.subtask, checkpoint_id)
        with self.conn.cursor() as cur:
            where, epoch = "WHERE job = %s AND subtask = %s AND checkpoint_id = %s", (self.sink.job, self.subtask,
                                                                                     checkpoint_id)
            cur.execute(f"SELECT lineage FROM {self.sink.epochs()} {where}", epoch)
            recorded = cur.fetchone()
            ours = recorded is not None and (recorded[0] is None or self.lineage in (None, recorded[0]))
            if ours:
                log.info("%s: epoch %d of subtask %d was committed already: its replay is dropped", self.sink.who,
                         checkpoint_id, self.subtask)
                self.conn.rollback()
                self.rows = self.seq = 0
                return None
            if recorded is not None:  # another run's epoch under this id (a restored savepoint's ids began again)
                log.info("%s: epoch %d of subtask %d was another run's (lineage %s): recorded anew", self.sink.who,
                         checkpoint_id, self.subtask, recorded[0])
                cur.execute(f"DELETE FROM {self.sink.epochs()} {where}", epoch)
            cur.execute(f"INSERT INTO {self.sink.epochs()} (job, subtask, checkpoint_id, rows, lineage) "
                        "VALUES (%s, %s, %s, %s, %s)", (*epoch, self.rows, self.lineage))
            cur.execute(f"PREPARE TRANSACTION '{gid}'")  # gid: our digits and the checked job name
        self.conn.commit()  # the session leaves the (now prepared) transaction
        prepared = PreparedEpoch(gid, self.subtask, checkpoint_id, self.rows, self.staged if self.sink.key else None)
        self.rows = self.seq = 0
        self.staged = staging_id(self.sink.job, self.subtask)
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
            row = {k: v for k, v in row_of(arrow, int(digits) - 1).items() if k not in (TXN, SEQ)}
            return repr(row)
    return f"<one of {arrow.num_rows} rows>"


def _dumps(value: Any) -> str:
    import json

    return json.dumps(value, default=str)
