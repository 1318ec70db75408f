"""PostgresCdcSource: a table's inserts, updates and deletes as a changelog, from a logical
replication slot (pgoutput), exactly once.

A replication slot is PostgreSQL's replayable log (dissertation §3.3.1.2, a replayable source;
§4.1, "Rollback": sources rewind to the offsets in the snapshot, which needs a durable,
indexed, sequenced log):
it keeps the WAL from its *confirmed* position on, and decodes the transactions committed after
it, in commit order. The split's position is an LSN (where the last transaction read ends) and
a count of rows already read of the next one, checkpointed like any source's position. The slot
is advanced (`pg_replication_slot_advance`) only when a checkpoint completes, to the position
that checkpoint holds (`notify_checkpoint_complete`), so a restore always finds every change
after its checkpoint still in the slot.

psycopg 3 speaks no replication protocol, so the reader uses the SQL interface, on a temporary
*copy* of the slot (`pg_copy_logical_replication_slot`) made when the split is opened: it
consumes the copy (`pg_logical_slot_get_binary_changes`, each change decoded once) while the
slot itself moves only with the checkpoints. Peeking the slot instead would decode every change
since the last complete checkpoint again at each read. A restore (or a lost connection) copies
the slot again and steps over the transactions that end at or before the position.
"""

from __future__ import annotations

import logging
import re
import time
import uuid
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from ...api.connector import RejectedInput, Source, SplitReader
from ...errors import EpochalError
from ..extras import require
from .changelog import BadValue, Rows, to_batch, values_of
from .connection import connect, first_line, is_disconnect, quote_name, server_name, split_name
from .pgoutput import Begin, Change, Commit, Relation, Truncate, format_lsn, parse, parse_lsn, tuple_at, unpack_int

log = logging.getLogger(__name__)

_SLOT = re.compile(r"[a-z0-9_]{1,50}")
_SESSION = "SET TimeZone = 'UTC'; SET DateStyle = 'ISO'; SET extra_float_digits = 3; SET bytea_output = 'hex'"


@dataclass(frozen=True, slots=True)
class CdcSplit:
    """One replication slot and the publication (table set) it decodes."""

    slot: str
    publication: str
    tables: tuple[str, ...]

    @property
    def split_id(self) -> str:
        return self.slot


@dataclass(slots=True)
class _Transaction:
    """A decoded transaction of the split's tables (per row: relation, op, values), and how
    many of its rows went out."""

    end_lsn: int
    commit_time: int
    relations: list[int]
    ops: list[str]
    values: list[tuple[object, ...] | None]
    emitted: int = 0

    def run_end(self, start: int, limit: int) -> int:
        """Where the run of rows of `start`'s relation ends, at most `limit` rows on."""
        relations, end = self.relations, min(len(self.relations), start + limit)
        if relations[start] == relations[end - 1] and len(set(relations[start:end])) == 1:
            return end
        i = start
        while i < end and relations[i] == relations[start]:
            i += 1
        return i


class _CdcReader(SplitReader):
    def __init__(self, source: PostgresCdcSource, split: CdcSplit, position: tuple[int, int] | None) -> None:
        self.source, self.split = source, split
        self.lsn, self.skip = position if position is not None else (0, 0)
        self.fetched = self.lsn  # the end of the last transaction fetched into `pending`
        self.pending: deque[_Transaction] = deque()
        self.relations: dict[int, Relation] = {}
        self.conn: Any = None
        self.down_since: float | None = None
        self.acknowledged = 0
        self.tolerant = False
        self._rejected: list[RejectedInput] = []
        self._restored = position is not None
        self._open()

    # -- the connection and the slot's copy ---------------------------------------------------
    def _open(self) -> None:
        self.conn = connect(self.source.dsn, self.source.who, autocommit=True, wait=0 if self.down_since else
                            self.source.connect_timeout)
        self.conn.execute(_SESSION)
        row = self.conn.execute("SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = %s",
                                (self.split.slot,)).fetchone()
        if row is None:
            raise EpochalError(f"{self.source.who}: no replication slot {self.split.slot!r}; was it dropped?")
        confirmed = parse_lsn(row[0])
        if self._restored and (self.lsn, self.skip) != (0, 0) and confirmed > self.lsn:
            raise EpochalError(
                f"{self.source.who}: slot {self.split.slot!r} was advanced to {format_lsn(confirmed)}, past the "
                f"checkpoint's position {format_lsn(self.lsn)}: the changes between are gone (restored from an "
                "older checkpoint than the last one completed?)")
        if not self._restored:  # a fresh split starts where the slot stands
            self.lsn = self.fetched = max(self.lsn, confirmed)
            self._restored = True
        self.acknowledged = confirmed
        self.copy = f"{self.split.slot[:40]}_r{uuid.uuid4().hex[:12]}"
        self.conn.execute("SELECT pg_copy_logical_replication_slot(%s, %s, true)", (self.split.slot, self.copy))
        self.down_since = None

    def _lost(self, exc: BaseException) -> None:
        if self.down_since is None:
            self.down_since = time.monotonic()
            log.warning("%s: lost the server %s (%s); waiting up to %g s for it", self.source.who,
                        server_name(self.source.dsn), first_line(exc), self.source.connect_timeout)
        try:
            self.conn.close()
        except Exception:  # noqa: BLE001 - a broken connection
            pass
        self.conn = None

    def _reconnect(self) -> bool:
        assert self.down_since is not None
        try:
            self._open()
            return True
        except EpochalError as exc:
            if time.monotonic() - self.down_since > self.source.connect_timeout:
                raise EpochalError(f"{self.source.who}: the server {server_name(self.source.dsn)} has been "
                                   f"unreachable for {self.source.connect_timeout:g} s: {exc}") from exc
            return False

    # -- reading ----------------------------------------------------------------------------------
    def read(self, max_records: int) -> pa.RecordBatch | list[Any] | None:
        if not self.pending:
            if self.conn is None and not self._reconnect():
                return []
            try:
                messages = self._fetch()
                while messages and not self.pending:  # read, but none of it ours (or read before)
                    messages = self._fetch()
            except Exception as exc:
                if not is_disconnect(exc):
                    raise
                self._lost(exc)
                return []
            if not self.pending:
                return None if self.source.until_lsn is not None else []
        return self._take(max(1, max_records))

    def retry_after(self) -> float:
        return 1.0 if self.conn is None else self.source.poll_interval

    def _fetch(self) -> int:
        """Decode the next transactions into `pending`; how many messages came."""
        until = self.source.until_lsn
        rows = self.conn.execute(
            "SELECT data FROM pg_logical_slot_get_binary_changes(%s, %s::pg_lsn, %s, 'proto_version', '1', "
            "'publication_names', %s)",
            (self.copy, None if until is None else format_lsn(until), self.source.fetch_changes,
             self.split.publication)).fetchall()
        relations: list[int] = []
        ops: list[str] = []
        values: list[tuple[object, ...] | None] = []
        begin: Begin | None = None
        for (data,) in rows:
            if data[0] == 73 and begin is not None:  # 'I', the common case, without a message object
                relations.append(unpack_int(data, 1)[0])
                ops.append("insert")
                values.append(tuple_at(data, 6)[0])
                continue
            message = parse(data)
            if isinstance(message, Change):
                if begin is None:
                    continue
                if message.op == "update" and message.old is not None:  # the key changed: the old one goes
                    relations.append(message.relation)
                    ops.append("delete")
                    values.append(message.old)
                relations.append(message.relation)
                ops.append(message.op)
                values.append(message.old if message.op == "delete" else message.new)
            elif isinstance(message, Begin):
                begin, relations, ops, values = message, [], [], []
            elif isinstance(message, Relation):
                self.relations[message.oid] = message
            elif isinstance(message, Truncate) and begin is not None:
                for oid in message.relations:
                    relations.append(oid)
                    ops.append("truncate")
                    values.append(None)
            elif isinstance(message, Commit) and begin is not None:
                end = message.end_lsn
                if end > self.fetched:  # else read before this copy of the slot was made
                    if not self.pending and self.skip == 0 and not ops:
                        self.lsn = end  # nothing of ours: the position moves past it (the slot may too)
                    else:
                        emitted = self.skip if not self.pending else 0  # a restore read these already
                        self.pending.append(_Transaction(end, begin.commit_time, relations, ops, values, emitted))
                    self.fetched = end
                begin = None
        return len(rows)

    def _take(self, max_records: int) -> pa.RecordBatch | list[Any]:
        """Rows of one table from the front of `pending`, across transactions, up to `max_records`."""
        taken = Rows([], [], [], [])
        relation: int | None = None
        while self.pending and len(taken) < max_records:
            txn = self.pending[0]
            i = txn.emitted
            if i < len(txn.ops):
                if relation is None:
                    relation = txn.relations[i]
                if txn.relations[i] != relation:
                    break
                j = txn.run_end(i, max_records - len(taken))
                taken.ops.extend(txn.ops[i:j])
                taken.values.extend(txn.values[i:j])
                taken.lsns.extend([txn.end_lsn] * (j - i))
                taken.times.extend([txn.commit_time] * (j - i))
                txn.emitted = i = j
            if i < len(txn.ops):
                self.skip = i
                break
            self.pending.popleft()
            self.lsn, self.skip = txn.end_lsn, 0
        if relation is None:
            return []
        return self._batch(self.relations[relation], taken)

    def _batch(self, relation: Relation, rows: Rows) -> pa.RecordBatch | list[Any]:
        while True:
            try:
                return to_batch(relation, rows)
            except BadValue as exc:
                bad = values_of(relation, rows, exc.row)
                if not self.tolerant:
                    raise EpochalError(f"{self.source.who}: a change of {relation.qualified} at "
                                       f"{format_lsn(rows.lsns[exc.row])} does not convert: {exc}; {bad}") from exc
                self._rejected.append(RejectedInput(bad, str(exc), {"slot": self.split.slot,
                                                                    "lsn": format_lsn(rows.lsns[exc.row])}))
                rows = rows.without(exc.row)
                if not len(rows):
                    return []

    def position(self) -> tuple[int, int]:
        return (self.lsn, self.skip)

    def tolerate_bad_input(self) -> None:
        self.tolerant = True

    def rejected(self) -> list[RejectedInput]:
        out, self._rejected = self._rejected, []
        return out

    def notify_checkpoint_complete(self, checkpoint_id: int, position: Any) -> None:
        lsn = position[0]
        if lsn <= self.acknowledged or self.conn is None:
            return  # nothing new (or the server is away: the next checkpoint's notice advances it)
        try:
            self.conn.execute("SELECT pg_replication_slot_advance(%s, %s::pg_lsn)", (self.split.slot, format_lsn(lsn)))
        except Exception as exc:
            if not is_disconnect(exc):
                raise
            self._lost(exc)
            return
        self.acknowledged = lsn

    def close(self) -> None:
        if self.conn is not None:
            try:
                self.conn.close()  # the slot's temporary copy goes with the session
            except Exception:  # noqa: BLE001 - closing a broken connection
                pass
            self.conn = None


class PostgresCdcSource(Source):
    """Inserts, updates and deletes of PostgreSQL tables, as Arrow batches with an `op` column.

    Args:
        dsn: a libpq connection string or URI; the user needs the REPLICATION attribute (or to
            be a superuser) and the server `wal_level = logical`.
        tables: the tables to follow (`name` or `schema.name`). Each item is one split, read
            in parallel with the others: a table, or a list of tables read together, in the
            order their transactions committed. Items are a replication slot and a
            publication each.
        slot: the replication slot's name (lowercase letters, digits, `_`); with several
            splits, `<slot>_<i>`. Created, with its publication (`<slot>` too), when missing.
            The slot is where a new job starts: the changes committed since it was created,
            or since the last complete checkpoint of the job that read it.
        bounded: stop at the changes committed before the source was made (a backfill, a
            test); default: follow the tables forever.
        connect_timeout: seconds to wait for a server that cannot be reached before failing.
        poll_interval: seconds between two reads of a slot that had nothing.
        fetch_changes: changes decoded per read of the slot (whole transactions: more if
            one is larger).

    Changes before the slot existed are not read (no initial snapshot of the tables). A slot
    keeps the server's WAL until the job's checkpoints move it on: drop the slot
    (`SELECT pg_drop_replication_slot('...')`) when the job is retired.
    """

    def __init__(
        self,
        dsn: str,
        tables: str | Sequence[str | Sequence[str]],
        *,
        slot: str = "epochal",
        bounded: bool = False,
        connect_timeout: float = 60.0,
        poll_interval: float = 0.1,
        fetch_changes: int = 20_000,
    ) -> None:
        require("psycopg", "PostgresCdcSource")  # one line, before Spark starts, if the extra is missing
        self.dsn = str(dsn)
        items = [tables] if isinstance(tables, str) else list(tables)
        if not items:
            raise ValueError("tables: name at least one table")
        groups = [(t,) if isinstance(t, str) else tuple(t) for t in items]
        for group in groups:
            for table in group:
                quote_name(table)
        if not _SLOT.fullmatch(slot):
            raise ValueError(f"slot must be lowercase letters, digits and '_' (at most 50), got {slot!r}")
        names = [slot] if len(groups) == 1 else [f"{slot}_{i}" for i in range(len(groups))]
        self._splits = [CdcSplit(n, n, g) for n, g in zip(names, groups)]
        self.connect_timeout = float(connect_timeout)
        self.poll_interval = float(poll_interval)
        self.fetch_changes = int(fetch_changes)
        self.who = f"PostgresCdcSource({slot})"
        self.until_lsn: int | None = None
        if bounded:
            self.ensure_slots()  # the bound must not precede the slots
            with connect(self.dsn, self.who, autocommit=True, wait=self.connect_timeout) as conn:
                # a transaction committed synchronously flushes the WAL of every commit before
                # it (a server with synchronous_commit = off may not have yet): all decodable
                conn.execute("SET synchronous_commit = on")
                conn.execute("SELECT pg_logical_emit_message(true, 'epochal', 'bound')")
                self.until_lsn = parse_lsn(_one(conn, "SELECT pg_current_wal_lsn()::text"))

    def splits(self) -> Sequence[CdcSplit]:
        return self._splits

    def open_split(self, split: Any, position: Any | None) -> SplitReader:
        return _CdcReader(self, split, position)

    def check(self) -> None:
        """Create the publications and slots that are missing; fail now if the server cannot
        decode (wal_level) or the user may not."""
        self.ensure_slots()

    def ensure_slots(self) -> None:
        with connect(self.dsn, self.who, autocommit=True, wait=self.connect_timeout) as conn:
            level = _one(conn, "SHOW wal_level")
            if level != "logical":
                raise EpochalError(f"{self.who}: the server {server_name(self.dsn)} has wal_level = {level}; "
                                   "set wal_level = logical (it needs a restart)")
            for split in self._splits:
                known = conn.execute("SELECT 1 FROM pg_publication WHERE pubname = %s", (split.publication,))
                if known.fetchone() is None:
                    conn.execute(f"CREATE PUBLICATION {quote_name(split.publication)} FOR TABLE "
                                 + ", ".join(quote_name(t) for t in split.tables))
                else:  # a table dropped (and made again) since has left the publication
                    listed = {f"{a}.{b}" for a, b in conn.execute(
                        "SELECT schemaname, tablename FROM pg_publication_tables WHERE pubname = %s",
                        (split.publication,)).fetchall()}
                    for table in split.tables:
                        if "{}.{}".format(*split_name(table)) not in listed:
                            conn.execute(f"ALTER PUBLICATION {quote_name(split.publication)} ADD TABLE "
                                         f"{quote_name(table)}")
                            log.info("%s: added %s to publication %s", self.who, table, split.publication)
                if conn.execute("SELECT 1 FROM pg_replication_slots WHERE slot_name = %s",
                                (split.slot,)).fetchone() is None:
                    conn.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (split.slot,))
                    log.info("%s: created replication slot %s", self.who, split.slot)


def _one(conn: Any, query: str) -> Any:
    """The one value a query returns."""
    row = conn.execute(query).fetchone()
    assert row is not None
    return row[0]
