"""ParquetSink: Parquet files committed exactly once per checkpoint, listed in Spark's sink log.

The two-phase commit is `FileSink`'s, the dissertation's temp file and atomic move (§4.1.4): a
subtask writes Arrow batches to a hidden staging file; `prepare_commit` closes it, and its name
pair is the committable; when the checkpoint completes, `commit` renames it to its visible
`part-*` name and then lists it in `_spark_metadata`, the log of Spark's own streaming file
sink (`FileStreamSinkLog`). When that log exists, `spark.read.parquet(path)` reads the files it
lists and nothing else, so Spark sees exactly the committed files; readers that list the
directory and skip hidden names (pyarrow, polars, DuckDB) see the same files.

The log is written as Spark writes it: `_spark_metadata/<batchId>` holds a `v1` line and one
JSON line per file; every `compact_interval`-th batch (`<batchId>.compact`) repeats every entry
before it. Each sink subtask commits on its own (on the checkpoint's completion notice), so a
checkpoint's files land in one batch per subtask: a batch id is taken by creating its file only
if it does not exist yet (a hard link on a local disk, a rename on HDFS), as Spark's
`HDFSMetadataLog` does, and a subtask that loses the race takes the next id. A commit repeated
after a failure finds its files in the log already and adds nothing: commits are idempotent.
They are idempotent per epoch too, as `FileSink`'s: a file's name holds the run's lineage, the
subtask and the checkpoint id, and an epoch replayed after a fallback to an older checkpoint
finds its name taken and is skipped (listed in the log all the same, if the first commit stopped
before it was).

Records to Arrow and the Parquet file writer, which `FileSink` and `DeltaSink` use too, are in
`arrow_files`.
"""

from __future__ import annotations

import json
import logging
import os
import re
import threading
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal, cast
from urllib.parse import quote, urlsplit

import pyarrow as pa
import pyarrow.fs as pafs

from ..api.connector import Sink, SinkWriter
from ..errors import CheckpointError, EpochalError
from ..runtime.wire.elements import Batch
from ..state.checked_files import resolve_uri
from ..validation import check_bool, check_choice, check_instance, check_int, check_name, check_path
from .arrow_files import (
    ROW_GROUP_ROWS,
    ArrowConformer,
    ParquetFileWriter,
    delete_quietly,
    exists,
    fsync,
    has_exclusive_create,
    probe_writable,
    publish_if_absent,
)
from .part_files import PartFiles, PendingFile, StagedName

log = logging.getLogger(__name__)

ParquetSinkMode = Literal["error", "overwrite", "append"]
MODES: tuple[ParquetSinkMode, ...] = ("error", "overwrite", "append")
METADATA_DIR = "_spark_metadata"
_COMPACT = ".compact"
_BLOCK_SIZE = 32 * 1024 * 1024  # what Hadoop reports for a local file; Spark only splits by it
_RACES = 100  # batch ids lost to other subtasks before a commit gives up

# The names `ParquetSink` gives its files: only these are deleted by "overwrite" and recovery.
_COMMITTED = re.compile(r"part-\d{5,}-\d{8,}-[0-9a-f]{12}\.parquet")
_STAGING = re.compile(r"\.part-\d{5,}-[0-9a-f]{12}\.parquet\.inprogress")
_SHOWN = 3  # committed files a refusal names


# -- Spark's file-sink log -------------------------------------------------------------------------
class SparkSinkLog:
    """The `_spark_metadata` log of one directory, as Spark's `FileStreamSinkLog` keeps it.

    Reads are incremental: the entries seen so far are cached, and a refresh reads only the
    batches written since (from the latest compaction, if one was written meanwhile).
    """

    def __init__(self, fs: pafs.FileSystem, root: str, root_uri: str, compact_interval: int) -> None:
        self.fs = fs
        self.root = root
        self.root_uri = root_uri
        self.directory = f"{root}/{METADATA_DIR}"
        self.default_interval = compact_interval
        self._interval: int | None = None
        self._lines: list[str] = []  # every entry, as written, in log order
        self._paths: set[str] = set()
        self._read_upto = -1
        self._lock = threading.Lock()

    def file_uri(self, path: str) -> str:
        """The URI Spark records for a file of the directory."""
        return self.root_uri + quote(path[len(self.root) :])

    def listed(self) -> set[str]:
        """The URIs of every file the log lists."""
        with self._lock:
            self._refresh()
            return set(self._paths)

    def add(self, paths: list[str]) -> None:
        """List the files at `paths` in a new batch, unless the log lists them already."""
        with self._lock:
            self.fs.create_dir(self.directory)
            for _ in range(_RACES):
                latest = self._refresh()
                new = [p for p in paths if self.file_uri(p) not in self._paths]
                if not new:
                    return
                lines = [self._entry(p) for p in new]
                batch_id = latest + 1
                body = self._lines + lines if self._is_compaction(batch_id) else lines
                if self._create(batch_id, body):
                    return
            raise CheckpointError(f"ParquetSink: lost {_RACES} races for a batch id of {self.directory}")

    def _entry(self, path: str) -> str:
        info = self.fs.get_file_info(path)
        entry = {
            "path": self.file_uri(path), "size": info.size, "isDir": False,
            "modificationTime": info.mtime_ns // 1_000_000, "blockReplication": 1, "blockSize": _BLOCK_SIZE,
            "action": "add",
        }
        return json.dumps(entry, separators=(",", ":"))

    def _batch_files(self) -> dict[int, str]:
        infos = self.fs.get_file_info(pafs.FileSelector(self.directory, allow_not_found=True))
        batches: dict[int, str] = {}
        for info in infos:
            name = info.base_name
            stem = name[: -len(_COMPACT)] if name.endswith(_COMPACT) else name
            if stem.isdigit():
                batches[int(stem)] = name
        return batches

    def _refresh(self) -> int:
        """Read the batches written since the last refresh; the latest batch id (-1: none)."""
        batches = self._batch_files()
        if self._interval is None:
            compactions = sorted((b for b, n in batches.items() if n.endswith(_COMPACT)), reverse=True)
            self._interval = _compact_interval(self.default_interval, compactions)
        latest = max(batches, default=-1)
        if latest <= self._read_upto:
            return latest
        start = self._read_upto + 1
        compacted = [b for b, n in batches.items() if n.endswith(_COMPACT) and start <= b <= latest]
        if compacted:  # a compaction repeats everything before it
            start = max(compacted)
            self._lines, self._paths = [], set()
        for batch_id in range(start, latest + 1):
            if batch_id not in batches:
                raise CheckpointError(f"ParquetSink: batch {batch_id} of {self.directory} is missing")
            for line in self._read(f"{self.directory}/{batches[batch_id]}"):
                entry = json.loads(line)
                if entry.get("action") == "add" and entry["path"] not in self._paths:
                    self._lines.append(line)
                    self._paths.add(entry["path"])
        self._read_upto = latest
        return latest

    def _read(self, path: str) -> list[str]:
        with self.fs.open_input_stream(path) as f:
            lines = f.read().decode("utf-8").split("\n")
        if lines[0] != "v1":
            raise CheckpointError(f"ParquetSink: {path} is not a version 1 file-sink log ({lines[0][:20]!r})")
        return [line for line in lines[1:] if line.strip()]

    def _is_compaction(self, batch_id: int) -> bool:
        return (batch_id + 1) % cast(int, self._interval) == 0

    def _create(self, batch_id: int, lines: list[str]) -> bool:
        """Write batch `batch_id` unless it exists; False if another subtask took the id first."""
        name = f"{batch_id}{_COMPACT if self._is_compaction(batch_id) else ''}"
        final = f"{self.directory}/{name}"
        temp = f"{self.directory}/.{name}.{uuid.uuid4().hex}.tmp"  # Spark skips names that are not numbers
        with self.fs.open_output_stream(temp) as out:
            out.write(("v1" + "".join("\n" + line for line in lines)).encode("utf-8"))
        try:
            return publish_if_absent(self.fs, temp, final)
        finally:
            delete_quietly(self.fs, temp)


def _compact_interval(default: int, compactions: list[int]) -> int:
    """The compaction interval of an existing log, derived as Spark derives it
    (`CompactibleFileStreamLog.compactInterval`): the gap between the two latest compactions, a
    divisor of the only one's id + 1, or the default when there is none."""
    if len(compactions) >= 2:
        return compactions[0] - compactions[1]
    if not compactions:
        return default
    n = compactions[0] + 1
    if n > default and default < n // 2:  # the first divisor of n at least the default
        return next((i for i in range(default, n // 2 + 1) if n % i == 0), n)
    return n


# -- the sink ----------------------------------------------------------------------------------------
PendingParquetFile = PendingFile  # the name older checkpoints' committables were pickled under


class _ParquetSinkWriter(SinkWriter):
    def __init__(self, sink: ParquetSink, subtask: int, parts: PartFiles) -> None:
        self.sink = sink
        self.fs = parts.fs
        self.parts = parts
        self._conform = ArrowConformer(sink.schema)
        self._file: ParquetFileWriter | None = None
        self._staged: StagedName | None = None

    def set_lineage(self, lineage: str) -> None:
        self.parts.set_lineage(lineage)

    def write(self, batch: Batch) -> None:
        arrow = self._conform(batch)
        if self._file is None:
            self._staged = self.parts.new_staging()
            self._file = ParquetFileWriter(
                self.fs, self._staged.path, arrow.schema, self.sink.compression, self.sink.row_group_rows
            )
        self._file.write(arrow)

    def prepare_commit(self, checkpoint_id: int) -> PendingFile | None:
        file, self._file = self._file, None
        if file is None or self._staged is None or file.finish() is None:
            return None
        return self.parts.pending(self._staged, checkpoint_id, "parquet")

    def recover(self) -> None:
        self.parts.drop_uncommitted()

    def close(self) -> None:
        if self._file is not None:
            self._file.abort()
            self._file = None


class ParquetSink(Sink):
    """Writes Parquet files, one per subtask and checkpoint, visible once their checkpoint completes.

    Args:
        path: the output directory, a local path or a `pyarrow.fs` URI (`s3://…`, `hdfs://…`).
        schema: the files' Arrow schema; default: the first batch's (see `ArrowConformer`).
            Records (tuples, dicts, values) are made columns; Arrow batches are written as they come.
        mode: what a job that does not resume from a checkpoint does with output already in
            `path`: `"error"` (default) refuses to start, `"overwrite"` deletes the files a
            ParquetSink wrote and the `_spark_metadata` log, `"append"` adds to them.
        spark_metadata: keep Spark's file-sink log, so that `spark.read.parquet(path)` reads
            exactly the committed files. On storage without an atomic create-if-absent (object
            stores) the log can be kept by one subtask only: parallelism 1, or False.
        compact_interval: Spark's `spark.sql.streaming.fileSink.log.compactInterval`; readers
            must use the same value (Spark's default is 10).
        compression: the Parquet codec. row_group_rows: rows per row group, at most.
        partition_by: columns whose values name Hive-style directories (`dt=2015-07-15/`), as
            Spark's `partitionBy` writes them; the files hold the other columns (`partitions`).
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        schema: pa.Schema | None = None,
        *,
        mode: ParquetSinkMode = "error",
        spark_metadata: bool = True,
        compact_interval: int = 10,
        compression: str = "snappy",
        row_group_rows: int = ROW_GROUP_ROWS,
        partition_by: Sequence[str] = (),
    ) -> None:
        self.path = check_path("path", path)
        self.schema = None if schema is None else check_instance("schema", schema, pa.Schema)
        self.mode = cast(ParquetSinkMode, check_choice("mode", mode, MODES))
        self.spark_metadata = check_bool("spark_metadata", spark_metadata)
        self.compact_interval = check_int("compact_interval", compact_interval)
        self.compression = compression
        self.row_group_rows = check_int("row_group_rows", row_group_rows)
        self.partition_by = tuple(check_name("partition_by", c) for c in partition_by)
        self._target: tuple[pafs.FileSystem, str] | None = None
        self._log: SparkSinkLog | None = None

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_target"] = state["_log"] = None  # per process: rebuilt where the sink runs
        return state

    def target(self) -> tuple[pafs.FileSystem, str]:
        """The filesystem and the directory of `path`."""
        if self._target is None:
            self._target = resolve_uri(self.path)
        return self._target

    def spark_log(self) -> SparkSinkLog:
        """The directory's `_spark_metadata` log (cached: its entries are read incrementally)."""
        if self._log is None:
            fs, root = self.target()
            self._log = SparkSinkLog(fs, root, _root_uri(self.path, root), self.compact_interval)
        return self._log

    def check(self, resuming: bool) -> None:
        """Fail now if the directory is not writable or (fresh start, mode "error") holds
        output; mode "overwrite" deletes that output here."""
        fs, root = self.target()
        probe_writable(fs, root, "ParquetSink")
        if resuming or self.mode == "append":
            return
        infos = fs.get_file_info(pafs.FileSelector(root, recursive=bool(self.partition_by)))
        names = sorted(i.path[len(root) + 1:] for i in infos)
        if self.mode == "error":
            committed = [n for n in names if os.path.basename(n).startswith("part-")]
            if committed or METADATA_DIR in names:
                shown = ", ".join((committed or [METADATA_DIR])[:_SHOWN])
                more = f" and {len(committed) - _SHOWN} more" if len(committed) > _SHOWN else ""
                raise EpochalError(
                    f"ParquetSink: {self.path} already holds output ({shown}{more}); resume the run "
                    'that wrote it with from_checkpoint="latest" (epochal run --from-checkpoint latest), '
                    'or pass ParquetSink(..., mode="overwrite") to replace it or mode="append" to add to it'
                )
        overwrite = self.mode == "overwrite"
        base = os.path.basename
        doomed = [n for n in names if _STAGING.fullmatch(base(n)) or (overwrite and _COMMITTED.fullmatch(base(n)))]
        for name in doomed:
            delete_quietly(fs, f"{root}/{name}")
        if overwrite and METADATA_DIR in names:
            fs.delete_dir(f"{root}/{METADATA_DIR}")
        if doomed:
            log.info("ParquetSink: removed %d file(s) of an earlier run from %s", len(doomed), self.path)

    def check_parallelism(self, parallelism: int) -> None:
        """Fail before the job starts if `parallelism` writers cannot share the log."""
        fs, _ = self.target()
        if self.spark_metadata and parallelism > 1 and not has_exclusive_create(fs):
            raise EpochalError(
                f"ParquetSink: {self.path} is on {fs.type_name}, which cannot create a file only if it "
                "is absent, so parallel subtasks cannot share a _spark_metadata log; sink with "
                "parallelism 1 or pass spark_metadata=False"
            )

    def create_writer(self, subtask: int, parallelism: int) -> SinkWriter:
        fs, root = self.target()
        self.check_parallelism(parallelism)  # checked at start too; a sink built by hand meets it here
        fs.create_dir(root)
        if self.partition_by:
            from .partitions import PartitionedWriter

            return PartitionedWriter(self, subtask, self._parts(subtask))
        return _ParquetSinkWriter(self, subtask, self._parts(subtask))

    def _parts(self, subtask: int) -> PartFiles:
        fs, root = self.target()
        return PartFiles(fs, root, subtask, ".parquet.inprogress", _STAGING)

    def commit(self, committables: list[Any]) -> None:
        fs, _ = self.target()
        committables = [p for c in committables for p in getattr(c, "files", (c,))]  # a partitioned subtask's
        for pending in committables:
            if exists(fs, pending.staging) and exists(fs, pending.final):  # an epoch replayed: committed before
                log.info("ParquetSink: %s is committed already (a replayed epoch): skipped", pending.final)
                delete_quietly(fs, pending.staging)
            elif exists(fs, pending.staging):
                fs.move(pending.staging, pending.final)
            elif not exists(fs, pending.final):
                raise CheckpointError(
                    f"ParquetSink: staged file {pending.staging} is gone and {pending.final} does not exist"
                )
        if isinstance(fs, pafs.LocalFileSystem):
            for directory in sorted({os.path.dirname(p.final) for p in committables}):
                fsync(directory)  # the renames survive a crash of the machine
        if self.spark_metadata and committables:
            self.spark_log().add([p.final for p in committables])


# -- helpers ---------------------------------------------------------------------------------------
def _root_uri(path: str, root: str) -> str:
    """The URI of the directory as Spark (Hadoop) names it: `file:///…`, `s3a://…`, `hdfs://…`."""
    if "://" not in path:
        return Path(root).as_uri()
    parts = urlsplit(path)
    scheme = {"s3": "s3a", "file": "file"}.get(parts.scheme, parts.scheme)
    if scheme == "file":
        return Path(root).as_uri()
    return f"{scheme}://{parts.netloc}{quote(root)}" if root.startswith("/") else f"{scheme}://{quote(root)}"
