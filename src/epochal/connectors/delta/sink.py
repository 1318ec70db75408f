"""DeltaSink: a Delta Lake table written exactly once, by Delta's application transaction ids.

The two-phase commit (dissertation §4.1.3) runs on Delta's own log. A sink subtask writes the
records of an epoch to one Parquet file: appends write a data file in the table directory,
which no reader sees before a commit lists it; upserts (`merge_key`) write a staging file under
`_epochal_staging/`. `prepare_commit` seals the file into a committable that carries the
writer's application id and the checkpoint id. `commit`, on the checkpoint's completion notice,
makes it one Delta commit that also records the transaction action `txn(appId, version =
checkpoint id)` (Delta protocol, "Transaction Identifiers"). Before committing it reads the
table's version for that app id and skips every committable at or below it: a commit repeated
after a failure, also one cut short between Delta's commit and the end of the notice, adds
nothing. That is the idempotence the txn action exists for (Spark's `foreachBatch` writes with
`txnAppId`/`txnVersion` for the same reason).

An app id belongs to one subtask of one run: `epochal-<lineage>-s<subtask>`, the lineage being the
run's (`SinkWriter.set_lineage`: kept in the sink's checkpointed state, so the same in every
attempt restored from the run's checkpoints, new for a fresh run, whose checkpoint ids start at
1 again). A subtask commits its checkpoints in order, so "the table's version for this id is at
least this checkpoint" means "this epoch is in": a committable restored from a checkpoint and
committed again is skipped, and so is an epoch replayed after a fallback to an older checkpoint
(the job master cuts it where the first run did), which makes the sink idempotent per epoch.

Each sink subtask commits on its own (the runtime commits in every sink subtask, not on the job
master), so a checkpoint is one Delta commit per subtask that wrote something. Commits that
conflict with another subtask's (upserts read the table) are tried again on the new version.
"""

from __future__ import annotations

import logging
import os
import random
import threading
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, cast

import numpy as np
import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from ...api.connector import Sink, SinkWriter
from ...errors import CheckpointError, EpochalError
from ...runtime.wire.elements import Batch
from ...state.checked_files import resolve_uri
from ...validation import check_choice, check_instance, check_path
from ..arrow_files import ROW_GROUP_ROWS, ArrowConformer, ParquetFileWriter, delete_quietly, probe_writable

if TYPE_CHECKING:
    from deltalake import DeltaTable

log = logging.getLogger(__name__)

DeltaSinkMode = Literal["error", "overwrite", "append"]
MODES: tuple[DeltaSinkMode, ...] = ("error", "overwrite", "append")
STAGING_DIR = "_epochal_staging"  # hidden from Delta readers and from VACUUM (a leading "_")
_ATTEMPTS = 60  # commits that lose to other subtasks' before one gives up
_ROW = "__epochal_row"


@dataclass(frozen=True, slots=True)
class DeltaFile:
    """A Parquet file a writer closed: its path under the table root, and its Add action's fields."""

    path: str
    size: int
    modification_ms: int
    stats: str


@dataclass(frozen=True, slots=True)
class DeltaCommittable:
    """What one writer wrote up to a checkpoint: committed as `txn(app_id, checkpoint_id)`."""

    app_id: str
    checkpoint_id: int
    schema: pa.Schema
    files: tuple[DeltaFile, ...]


class _DeltaWriter(SinkWriter):
    def __init__(self, sink: DeltaSink, subtask: int) -> None:
        self.sink = sink
        self.subtask = subtask
        self.app_id = f"epochal-{uuid.uuid4().hex[:16]}-s{subtask}"  # until `set_lineage`
        self.fs, self.root = sink.target()
        self._conform: ArrowConformer | None = None
        self._file: ParquetFileWriter | None = None

    def set_lineage(self, lineage: str) -> None:
        self.app_id = f"epochal-{lineage}-s{self.subtask}"

    def write(self, batch: Batch) -> None:
        if self._conform is None:  # the table's schema, if it has one: files must fit the table
            self._conform = ArrowConformer(self.sink.schema or self.sink.table_schema())
        arrow = self._conform(batch)
        if self._file is None:
            missing = [k for k in self.sink.merge_key if k not in arrow.schema.names]
            if missing:
                raise ValueError(
                    f"merge_key {missing} is not a column of the records {arrow.schema.names}; "
                    "name the columns with DeltaSink(..., schema=...)"
                )
            token = uuid.uuid4().hex
            name = (
                f"{STAGING_DIR}/s{self.subtask:05d}-{token}.parquet"
                if self.sink.merge_key
                else f"part-{self.subtask:05d}-{token}-c000.{self.sink.compression}.parquet"
            )
            self._file = ParquetFileWriter(
                self.fs, f"{self.root}/{name}", arrow.schema, self.sink.compression, ROW_GROUP_ROWS
            )
        self._file.write(arrow)

    def prepare_commit(self, checkpoint_id: int) -> DeltaCommittable | None:
        file, self._file = self._file, None
        if file is None:
            return None
        metadata = file.finish()
        if metadata is None:
            return None
        info = self.fs.get_file_info(file.path)
        path = file.path[len(self.root) + 1 :]
        written = DeltaFile(path, info.size, info.mtime_ns // 1_000_000, delta_stats(metadata, file.schema))
        return DeltaCommittable(self.app_id, checkpoint_id, file.schema, (written,))

    def recover(self) -> None:
        # Upserts: this subtask's staging files that no restored checkpoint committed will be
        # written again. Appends leave their uncommitted data files to VACUUM: no log lists them.
        if self.sink.merge_key:
            prefix = f"s{self.subtask:05d}-"
            selector = pafs.FileSelector(f"{self.root}/{STAGING_DIR}", allow_not_found=True)
            for info in self.fs.get_file_info(selector):
                if info.base_name.startswith(prefix):
                    delete_quietly(self.fs, info.path)

    def close(self) -> None:
        if self._file is not None:
            self._file.abort()
            self._file = None


class DeltaSink(Sink):
    """Writes a Delta Lake table (with the `deltalake` library: `pip install epochal[delta]`).

    Args:
        path: the table, a local path or a URI `deltalake` and `pyarrow.fs` both understand.
        merge_key: None (default) appends every record. A column name (or several) upserts: one
            row per key, the newest (the last one written). Keys should be routed to one sink
            subtask (sink a keyed stream): two subtasks that write one key in the same
            checkpoint leave either row.
        schema: the table's Arrow schema; default: the existing table's, else the first batch's.
        mode: what a job that does not resume from a checkpoint does with a table that holds
            data: `"error"` (default) refuses to start, `"overwrite"` deletes its rows (a Delta
            commit: older versions stay readable), `"append"` writes into it.
        storage_options: passed to `deltalake` (credentials of an object store).
        compression: the Parquet codec of the data files.

    Rows appear when the checkpoint that covers them completes, one Delta commit per sink
    subtask and checkpoint; every reader of Delta tables sees only committed rows.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        merge_key: str | Sequence[str] | None = None,
        schema: pa.Schema | None = None,
        mode: DeltaSinkMode = "error",
        storage_options: dict[str, str] | None = None,
        compression: str = "snappy",
    ) -> None:
        self.path = check_path("path", path)
        keys = [merge_key] if isinstance(merge_key, str) else list(merge_key or [])
        if not all(isinstance(k, str) and k for k in keys):
            raise ValueError(f"merge_key must be a column name or a list of them, got {merge_key!r}")
        self.merge_key: list[str] = keys
        self.schema = None if schema is None else check_instance("schema", schema, pa.Schema)
        self.mode = cast(DeltaSinkMode, check_choice("mode", mode, MODES))
        self.storage_options = storage_options
        self.compression = compression
        self.uri = self.path if "://" in self.path else os.path.abspath(self.path)
        self._target: tuple[pafs.FileSystem, str] | None = None
        self._table: DeltaTable | None = None
        self._lock: threading.Lock | None = None

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_target"] = state["_table"] = state["_lock"] = None  # per process
        return state

    def target(self) -> tuple[pafs.FileSystem, str]:
        """The filesystem and root directory of the table, for the data files."""
        if self._target is None:
            self._target = resolve_uri(self.path)
        return self._target

    def table(self) -> DeltaTable | None:
        """The table at its latest version, or None if there is none yet (cached per process)."""
        deltalake = _deltalake()
        if self._table is None:
            if not deltalake.DeltaTable.is_deltatable(self.uri, self.storage_options):
                return None
            self._table = deltalake.DeltaTable(self.uri, storage_options=self.storage_options)
        else:
            self._table.update_incremental()
        return self._table

    def table_schema(self) -> pa.Schema | None:
        """The existing table's schema as Arrow, or None."""
        table = self.table()
        return None if table is None else pa.schema(table.schema().to_arrow())

    def check(self, resuming: bool) -> None:
        """Fail now if `deltalake` is missing, the location is not writable, or (fresh start,
        mode "error") the table holds data; mode "overwrite" deletes its rows here."""
        deltalake = _deltalake()
        fs, root = self.target()
        probe_writable(fs, root, "DeltaSink")
        table = self.table()
        if table is not None and not resuming and self.mode != "append" and table.file_uris():
            if self.mode == "error":
                raise EpochalError(
                    f"DeltaSink: {self.path} is a Delta table with data (version {table.version()}); "
                    'resume the run that wrote it with from_checkpoint="latest" (epochal run '
                    '--from-checkpoint latest), or pass DeltaSink(..., mode="overwrite") to delete its '
                    'rows or mode="append" to write into it'
                )
            table.delete()
            log.info("DeltaSink: deleted the rows of %s (version %d)", self.path, table.version())
        if not resuming:  # no fresh run commits an earlier run's staging files
            fs.delete_dir_contents(f"{root}/{STAGING_DIR}", missing_dir_ok=True)
        if table is None and self.schema is not None:  # readers see an empty table at once
            deltalake.DeltaTable.create(self.uri, self.schema, mode="ignore", storage_options=self.storage_options)

    def create_writer(self, subtask: int, parallelism: int) -> SinkWriter:
        _deltalake()
        fs, root = self.target()
        fs.create_dir(f"{root}/{STAGING_DIR}" if self.merge_key else root)
        return _DeltaWriter(self, subtask)

    def commit(self, committables: list[Any]) -> None:
        if self._lock is None:
            self._lock = threading.Lock()
        by_app: dict[str, list[DeltaCommittable]] = {}
        for c in committables:
            by_app.setdefault(c.app_id, []).append(c)
        with self._lock:
            for app_id, mine in by_app.items():
                self._commit_app(app_id, sorted(mine, key=lambda c: c.checkpoint_id))

    def _commit_app(self, app_id: str, committables: list[DeltaCommittable]) -> None:
        """One Delta commit of what is not committed yet, tried again while others win."""
        deltalake = _deltalake()
        from deltalake.exceptions import CommitFailedError, DeltaError

        for attempt in range(_ATTEMPTS):
            table = self.table()
            done = None if table is None else table.transaction_version(app_id)
            todo = [c for c in committables if done is None or c.checkpoint_id > done]
            if not todo:
                break
            txn = deltalake.CommitProperties(
                app_transactions=[deltalake.Transaction(app_id, todo[-1].checkpoint_id)]
            )
            try:
                if self.merge_key:
                    self._merge(table, todo, txn)
                else:
                    self._append(table, todo, txn)
                break
            except DeltaError as exc:
                # a lost race: another subtask committed (or created the table) first
                if not isinstance(exc, CommitFailedError) and not (table is None and self.table() is not None):
                    raise
                self._table = None
                log.debug("DeltaSink: commit of %s lost a race (%s), again", app_id, exc)
                time.sleep(random.uniform(0, min(0.5, 0.005 * 2**attempt)))
        else:
            raise CheckpointError(f"DeltaSink: {self.path}: {_ATTEMPTS} commits of {app_id} lost to others")
        if self.merge_key:
            fs, root = self.target()
            for c in committables:
                for f in c.files:
                    delete_quietly(fs, f"{root}/{f.path}")

    def _append(self, table: DeltaTable | None, todo: list[DeltaCommittable], txn: Any) -> None:
        from deltalake.transaction import AddAction, RemoveAction, create_table_with_add_actions

        adds: list[AddAction | RemoveAction] = [
            AddAction(f.path, f.size, {}, f.modification_ms, True, f.stats) for c in todo for f in c.files
        ]
        schema = todo[-1].schema
        if table is None:
            create_table_with_add_actions(
                self.uri, _deltalake().Schema.from_arrow(schema), cast(list[AddAction], adds), mode="append",
                storage_options=self.storage_options, commit_properties=txn,
            )
        else:
            table.create_write_transaction(adds, "append", schema, commit_properties=txn)

    def _merge(self, table: DeltaTable | None, todo: list[DeltaCommittable], txn: Any) -> None:
        fs, root = self.target()
        parts = []
        for c in todo:
            for f in c.files:
                try:
                    with fs.open_input_file(f"{root}/{f.path}") as source:
                        parts.append(pq.read_table(source))
                except FileNotFoundError as exc:
                    raise CheckpointError(f"DeltaSink: staged file {root}/{f.path} of {c.app_id} is gone") from exc
        rows = newest_per_key(pa.concat_tables(parts, promote_options="default"), self.merge_key)
        if table is None:
            _deltalake().write_deltalake(
                self.uri, rows, mode="append", storage_options=self.storage_options, commit_properties=txn
            )
            return
        predicate = " AND ".join(f't."{k}" = s."{k}"' for k in self.merge_key)
        merger = table.merge(
            rows, predicate, source_alias="s", target_alias="t", streamed_exec=False, commit_properties=txn
        )
        merger.when_matched_update_all().when_not_matched_insert_all().execute()


def newest_per_key(rows: pa.Table, keys: list[str]) -> pa.Table:
    """The last row of every key, in the order those rows came."""
    numbered = rows.append_column(_ROW, pa.array(np.arange(rows.num_rows, dtype=np.int64)))
    last = numbered.group_by(keys, use_threads=False).aggregate([(_ROW, "max")])
    return rows.take(np.sort(last.column(f"{_ROW}_max").to_numpy()))


def delta_stats(metadata: pq.FileMetaData, schema: pa.Schema) -> str:
    """A Delta Add action's `stats` from a Parquet footer: row count, nulls per top-level column,
    and min/max of integer and string columns (other types get none, so readers skip nothing)."""
    import json

    ranged = {f.name for f in schema if pa.types.is_integer(f.type) or pa.types.is_string(f.type)}
    nulls: dict[str, int] = {}
    lows: dict[str, Any] = {}
    highs: dict[str, Any] = {}
    unknown: set[str] = set()
    for g in range(metadata.num_row_groups):
        group = metadata.row_group(g)
        for i in range(group.num_columns):
            column = group.column(i)
            name = column.path_in_schema
            if name not in schema.names:  # a nested column's leaf
                continue
            stats = column.statistics
            if stats is None or not stats.has_null_count:
                unknown.add(name)
                continue
            nulls[name] = nulls.get(name, 0) + stats.null_count
            if name in ranged and stats.has_min_max:
                lows[name] = stats.min if name not in lows else min(lows[name], stats.min)
                highs[name] = stats.max if name not in highs else max(highs[name], stats.max)
            elif name in ranged and stats.null_count < group.num_rows:
                unknown.add(name)  # values without a range: no range for the file
    out: dict[str, Any] = {"numRecords": metadata.num_rows}
    out["nullCount"] = {k: v for k, v in nulls.items() if k not in unknown}
    out["minValues"] = {k: v for k, v in lows.items() if k not in unknown}
    out["maxValues"] = {k: v for k, v in highs.items() if k not in unknown}
    return json.dumps(out, separators=(",", ":"))


def _deltalake(user: str = "DeltaSink") -> Any:
    """The deltalake module; an `EpochalError` naming the extra that installs it if it is missing."""
    try:
        import deltalake
    except ImportError as exc:
        raise EpochalError(f"{user} needs the deltalake library: pip install 'epochal[delta]' "
                           "(from a clone of the repository: pip install '.[delta]')") from exc
    return deltalake
