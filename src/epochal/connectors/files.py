"""FileSink: JSON lines, CSV or Parquet in `part-*` files, committed exactly once per checkpoint.

The dissertation's temp-file-and-atomic-move sink (§4.1.4): each subtask writes a hidden
staging file (`.part-…inprogress`); at a checkpoint it is closed (and fsynced on a local disk),
and its name pair becomes the subtask's committable; when the checkpoint completes the file is
renamed to its visible `part-…` name. A reader that skips names starting with `.` or `_` never
sees uncommitted records. A commit repeated after a failure finds the file renamed already and
changes nothing. Files go through `pyarrow.fs`, so the directory may be a URI (`s3://…`); an
object store has no rename, so there the commit copies the staged object to its name unless a
commit cut short did so already, then deletes it: the copy appears whole, and a repeat is as
harmless as a repeated rename.

Idempotent per epoch: subtask `s`'s file of checkpoint `n` is `part-<s>-<n>-<lineage>.<ext>`
(the run's lineage: `SinkWriter.set_lineage`), and an epoch replayed at its cut after a fallback
finds its name taken: skipped, its staged file dropped.

A fresh run cannot know what an earlier run committed into the same directory, so before the job
starts (`FileSink.check`) the sink's `mode` decides, as Spark's save modes do: `"error"` refuses
a directory that holds committed `part-*` files, `"overwrite"` deletes the files a FileSink wrote
there (and nothing else), `"append"` adds to them. A resumed job is never refused: its own
committed output is expected.

Arrow batches are written (`staged_files.py`) without a Python object per record: CSV by pyarrow's CSV writer,
Parquet by `ParquetFileWriter`, JSON lines (pyarrow has no JSON writer) column by column with
`pyarrow.compute`, as `json.dumps` writes the rows' tuples. Strings, integers, booleans and
nulls come out byte for byte as `json.dumps` writes them, floats as the same values (possibly in
other notation: `1e-05` may read `0.00001`); only columns of other types (timestamps, lists,
structs, …) go through `json.dumps` value by value, so they fail or succeed as they always did.
"""

from __future__ import annotations

import json
import logging
import os
import re
from collections.abc import Callable
from typing import Any, Literal, cast

import pyarrow as pa
import pyarrow.csv as pcsv
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from ..api.connector import Sink, SinkWriter
from ..errors import CheckpointError, EpochalError
from ..runtime.fault_points import fault_point
from ..runtime.wire.batches import batch_len
from ..runtime.wire.elements import Batch
from ..state.checked_files import resolve_uri
from ..validation import check_callable, check_choice, check_instance, check_path
from .arrow_files import (
    ArrowConformer,
    delete_quietly,
    exists,
    probe_writable,
)
from .json_lines import encode_record
from .part_files import PartFiles, PendingFile, StagedName
from .staged_files import StagedFile, staged_file

log = logging.getLogger(__name__)

FileSinkMode = Literal["error", "overwrite", "append"]
MODES: tuple[FileSinkMode, ...] = ("error", "overwrite", "append")
FileFormat = Literal["jsonl", "csv", "parquet"]
FORMATS: tuple[FileFormat, ...] = ("jsonl", "csv", "parquet")

# The names `_FileWriter` gives its files: only these are ever deleted by "overwrite". Staging
# names do not say the format: any FileSink's staged file is dropped alike.
_COMMITTED = re.compile(r"part-\d{5,}-\d{8,}-[0-9a-f]{12}\.(?:jsonl|csv|parquet)")
_STAGING = re.compile(r"\.part-\d{5,}-[0-9a-f]{12}\.inprogress")
_SHOWN = 3  # committed files a refusal names


# -- the sink ----------------------------------------------------------------------------------------
class _FileWriter(SinkWriter):
    def __init__(self, sink: FileSink, subtask: int) -> None:
        self.sink = sink
        self.fs, root = sink.target()
        self.parts = PartFiles(self.fs, root, subtask, ".inprogress", _STAGING)
        self._conform = ArrowConformer(sink.schema)  # one schema for all of this subtask's files
        self._file: StagedFile | None = None
        self._staged: StagedName | None = None

    def set_lineage(self, lineage: str) -> None:
        self.parts.set_lineage(lineage)

    def write(self, batch: Batch) -> None:
        if not batch_len(batch):
            return  # an empty batch makes no file: an empty one would be committed
        if self._file is None:
            self._staged = self.parts.new_staging()
            encode = None if self.sink.encode is encode_record else self.sink.encode
            self._file = staged_file(self.sink.format, self.fs, self._staged.path, self._conform, encode)
        self._file.write(batch)

    def prepare_commit(self, checkpoint_id: int) -> PendingFile | None:
        file, self._file = self._file, None
        if file is None or self._staged is None:
            return None
        file.finish()
        return self.parts.pending(self._staged, checkpoint_id, file.extension)

    def recover(self) -> None:
        self.parts.drop_uncommitted()

    def close(self) -> None:
        if self._file is not None:
            self._file.abort()
            self._file = None


class FileSink(Sink):
    """Writes records as JSON lines, CSV or Parquet to `part-*` files in a directory.

    Args:
        directory: where the files go (created if missing): a local path or a `pyarrow.fs` URI
            (`s3://bucket/out/`, `hdfs://…`).
        encode: for `"jsonl"`, turns a record into one line of text (default: compact JSON,
            tuples as arrays; Arrow batches are then encoded column by column).
        mode: what a job that does not resume from a checkpoint does with committed `part-*`
            files already in `directory`: `"error"` (the default, Spark's `errorIfExists`)
            refuses to start; `"overwrite"` deletes the files a FileSink wrote there (other
            files stay); `"append"` adds new files beside them. A resumed job keeps its output
            whatever the mode.
        format: `"jsonl"` (the default), `"csv"` (with a header) or `"parquet"`: the files'
            format and extension. CSV and Parquet take records as columns, as `ParquetSink` does
            (tuples: `f0`, `f1`, …; dicts by key; other values: `value`).
        schema: for `"csv"` and `"parquet"`, the files' Arrow schema; default: the first
            batch's. Pass one if early records may hold None.

    Files appear only when the checkpoint that covers them completes; with no periodic
    checkpoints, when the job ends.
    """

    def __init__(
        self,
        directory: str | os.PathLike[str],
        encode: Callable[[Any], str] | None = None,
        *,
        mode: FileSinkMode = "error",
        format: FileFormat = "jsonl",
        schema: pa.Schema | None = None,
    ) -> None:
        path = check_path("directory", directory)
        self.directory = path if "://" in path else os.path.abspath(path)
        self.format = cast(FileFormat, check_choice("format", format, FORMATS))
        self.mode = cast(FileSinkMode, check_choice("mode", mode, MODES))
        if encode is not None and self.format != "jsonl":
            raise ValueError(f'encode is for format="jsonl"; {self.format} files take records as columns')
        if schema is not None and self.format == "jsonl":
            raise ValueError('schema is for format="csv" or "parquet"; JSON lines need none')
        self.encode = encode_record if encode is None else check_callable("encode", encode)
        self.schema = None if schema is None else check_instance("schema", schema, pa.Schema)
        self._target: tuple[pafs.FileSystem, str] | None = None

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_target"] = None  # a filesystem per process: resolved again where the sink runs
        return state

    def target(self) -> tuple[pafs.FileSystem, str]:
        """The filesystem and the directory's path on it."""
        if self._target is None:
            self._target = resolve_uri(self.directory)
        return self._target

    def check(self, resuming: bool) -> None:
        """Fail now if the directory is not writable, or (on a fresh start, mode "error") holds
        committed output; mode "overwrite" deletes that output here."""
        fs, root = self.target()
        probe_writable(fs, root, "FileSink")
        if resuming or self.mode == "append":
            return
        names = sorted(info.base_name for info in fs.get_file_info(pafs.FileSelector(root)))
        if self.mode == "error":
            committed = [n for n in names if n.startswith("part-")]
            if committed:
                shown = ", ".join(committed[:_SHOWN])
                more = f" and {len(committed) - _SHOWN} more" if len(committed) > _SHOWN else ""
                raise EpochalError(
                    f"FileSink: {self.directory} already holds output ({shown}{more}); "
                    'resume the run that wrote it with from_checkpoint="latest" (epochal run '
                    '--from-checkpoint latest), or pass FileSink(..., mode="overwrite") to replace '
                    'those files or mode="append" to add to them'
                )
        # nothing a fresh run prepares can commit an earlier run's staging files: drop them too
        doomed = [n for n in names if _STAGING.fullmatch(n) or (self.mode == "overwrite" and _COMMITTED.fullmatch(n))]
        for name in doomed:
            delete_quietly(fs, f"{root}/{name}")
        if doomed:
            log.info("FileSink: removed %d file(s) of an earlier run from %s", len(doomed), self.directory)
        foreign = [n for n in names if n.startswith("part-") and not _COMMITTED.fullmatch(n)]
        if foreign:
            log.warning("FileSink: %s holds part-* files it did not write (kept): %s", self.directory, foreign[:_SHOWN])

    def create_writer(self, subtask: int, parallelism: int) -> SinkWriter:
        fs, root = self.target()
        fs.create_dir(root)
        return _FileWriter(self, subtask)

    def commit(self, committables: list[Any]) -> None:
        fs, root = self.target()
        for pending in committables:
            _publish(fs, pending)
            fault_point("sink.commit")  # tests: die with a file published, the rest and the notice not
        if isinstance(fs, pafs.LocalFileSystem):
            _fsync_dir(root)  # the renames survive a crash of the machine


def _publish(fs: pafs.FileSystem, pending: PendingFile) -> None:
    """Give a staged file its final name; done again after a failure, it changes nothing. A name
    taken already is an epoch committed before (replayed after a fallback): the staged file goes."""
    if exists(fs, pending.staging):
        if isinstance(fs, pafs.LocalFileSystem) or fs.type_name == "hdfs":
            if exists(fs, pending.final):
                log.info("FileSink: %s is committed already (a replayed epoch): skipped", pending.final)
                delete_quietly(fs, pending.staging)
                return
            fs.move(pending.staging, pending.final)  # atomic: one name or the other
            return
        # An object store has no rename (pyarrow's move copies, then deletes). Copy unless a
        # commit cut short did, then drop the staged object.
        if not exists(fs, pending.final):
            fs.copy_file(pending.staging, pending.final)
        delete_quietly(fs, pending.staging)
    elif not exists(fs, pending.final):
        raise CheckpointError(f"FileSink: staged file {pending.staging} is gone and {pending.final} does not exist")


def _fsync_dir(directory: str) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


# -- reading it back -------------------------------------------------------------------------------
def read_committed(directory: str | os.PathLike[str]) -> list[Any]:
    """Every record in the committed `part-*` files of a FileSink directory (a path or a URI;
    hidden files skipped), file by file in name order.

    JSON lines come back as parsed (tuples as lists). A CSV or Parquet row comes back as a list
    of its columns, or the bare value if the file has one column: what the JSON line of the same
    record reads back as. CSV values have the types pyarrow infers from the text.
    """
    fs, root = resolve_uri(os.fspath(directory))
    infos = fs.get_file_info(pafs.FileSelector(root))
    records: list[Any] = []
    for info in sorted(infos, key=lambda i: i.base_name):
        if info.base_name.startswith("part-") and info.type == pafs.FileType.File:
            records.extend(_read_part(fs, info.path))
    return records


def _read_part(fs: pafs.FileSystem, path: str) -> list[Any]:
    if path.endswith(".parquet"):
        return _rows(pq.read_table(path, filesystem=fs))
    with fs.open_input_stream(path) as f:
        if path.endswith(".csv"):
            return _rows(pcsv.read_csv(f))
        text = f.read().decode("utf-8")
    # split at newlines only: json.dumps leaves U+2028 and its kind (which splitlines splits at) as they are
    return [json.loads(line) for line in text.split("\n") if line.strip()]


def _rows(table: pa.Table) -> list[Any]:
    columns = [c.to_pylist() for c in table.columns]
    if len(columns) == 1:
        return columns[0]
    return [list(row) for row in zip(*columns)]
