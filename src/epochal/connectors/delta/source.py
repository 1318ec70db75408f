"""DeltaSource: a Delta table at one version, or followed as it grows (Spark's
`readStream.format("delta")`).

At a version, the table is read as a pyarrow dataset of its files, a row group per split, at
the version pinned when the source is made (`connectors.table`): every subtask, attempt and
restore reads the same files although the table moves on.

Followed (`follow=True`), the source is a replayable log whose entries are the table's versions
(dissertation §3.3.1.2): after the snapshot of the version it starts at, each later version's
added files are splits, found by the job master as they are committed (the enumerator of
`runtime.master.enumerator`, which checkpoints the split log, so the version read up to is in
every checkpoint), each read from a row offset. A Delta version is immutable and its files are
never rewritten, so a restore reads exactly what the first attempt read. A version that is not
an append (a delete, an update, a merge, an overwrite: it removes files with data) has no
answer in a stream of new rows: the job fails with one line naming the version, unless
`ignore_deletes` (pass over versions that only remove files, as Spark's `ignoreDeletes`) or
`skip_change_commits` (pass over every version that removes files, its added files too, as
Spark's `skipChangeCommits`) says otherwise. A schema change fails the job always, and so does
a version whose JSON log cleanup deleted before it was read (`log.gone`): waiting for it would
wait forever.

A driver restarted from a checkpoint makes the source anew (the job file runs again), pinned at
the table's newest version; `resumed` puts it back at the versions of the checkpoint's split
log (the snapshot's version is in its splits, the versions followed in theirs), so the versions
committed meanwhile are followed, one by one, not read again in a newer snapshot.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from ...api.connector import SplitReader
from ...errors import EpochalError
from ...state.checked_files import resolve_uri
from ..datasets import DatasetSource
from ..parquet_source import RowGroupReader, RowGroupSplit, one_batch
from .log import AddedFile, Version, gone, read_version, unreadable
from .sink import _deltalake

if TYPE_CHECKING:
    import pyarrow.dataset as ds


@dataclass(frozen=True, slots=True)
class VersionFileSplit:
    """A data file added by a version: read from its first row."""

    split_id: str
    version: int
    file: AddedFile
    error: str = ""  # a version that cannot be read as new rows: its reader fails with this


@dataclass(frozen=True, slots=True)
class SnapshotSplit(RowGroupSplit):
    """A row group of the snapshot a followed table is read from first, with its version."""

    version: int = -1


class _VersionFileReader(RowGroupReader):
    def __init__(self, source: DeltaSource, split: VersionFileSplit, position: int | None) -> None:
        if split.error:
            raise EpochalError(split.error)
        self.source = source
        self.file_split = split
        self.done = position or 0
        self._rows: pa.RecordBatch | None = None

    def read(self, max_records: int) -> pa.RecordBatch | None:
        if self._rows is None:
            self._rows = one_batch(self.source.read_file(self.file_split))
        if self.done >= self._rows.num_rows:
            return None
        rows = self._rows.slice(self.done, max_records)
        self.done += rows.num_rows
        return rows


class DeltaSource(DatasetSource):
    """A Delta table, read at one version or followed as new versions are committed.

    Args:
        path: the table: a local path or a URI `deltalake` and `pyarrow.fs` both know.
        version: the version to read; the newest when the source is made, by default. It is
            pinned then, so a restore reads what the first attempt read. With `follow`, the
            version whose snapshot is read first (unless a starting version or time is given).
        columns: the columns to read (all, partition columns included, by default).
        storage_options: passed to `deltalake` (an object store's credentials).
        follow: read the table's new versions as they are committed, forever: each version's
            added files, after the snapshot.
        starting_version: with `follow`, no snapshot: the changes of this version and later.
        starting_timestamp: with `follow`, no snapshot: the changes of the first version
            committed at or after this time (seconds since the epoch, or a `datetime`).
        poll_interval: with `follow`, seconds between two looks for a new version.
        ignore_deletes: with `follow`, pass over versions that only remove files (a delete).
        skip_change_commits: with `follow`, pass over every version that removes files (a
            delete, update, merge or overwrite), the files it adds with it.

    Without either option a version that removes files fails the job, naming the version.
    """

    def __init__(
        self,
        path: str,
        version: int | None = None,
        columns: Sequence[str] | None = None,
        storage_options: dict[str, str] | None = None,
        *,
        follow: bool = False,
        starting_version: int | None = None,
        starting_timestamp: Any = None,
        poll_interval: float = 1.0,
        ignore_deletes: bool = False,
        skip_change_commits: bool = False,
    ) -> None:
        super().__init__(columns)
        DeltaTable = _deltalake("DeltaSource").DeltaTable  # noqa: N806 - the library's class, named as it is

        if not follow and (starting_version is not None or starting_timestamp is not None):
            raise ValueError("starting_version and starting_timestamp are for follow=True")
        if starting_version is not None and (starting_timestamp is not None or version is not None):
            raise ValueError("give one of version, starting_version and starting_timestamp")
        self.path, self.storage_options = str(path), storage_options
        table = DeltaTable(self.path, storage_options=storage_options)
        self.follow, self.poll_interval = bool(follow), float(poll_interval)
        self.ignore_deletes, self.skip_change_commits = bool(ignore_deletes), bool(skip_change_commits)
        self.schema = pa.schema(table.schema().to_arrow())
        self.partitions = list(table.metadata().partition_columns)
        self._schema_json = json.loads(table.schema().to_json())
        if starting_timestamp is not None:
            starting_version = _version_at(table, starting_timestamp)
        self.snapshot = starting_version is None  # read the version's snapshot first
        self.version = table.version() if version is None else version
        self.first_change = self.version + 1 if starting_version is None else starting_version
        self._found: list[VersionFileSplit] = []  # the versions listed so far (on the job master)
        self._next = self.first_change
        self._stopped = False  # a version that cannot be read was met: nothing after it is listed

    def __getstate__(self) -> dict[str, Any]:
        return {**super().__getstate__(), "_found": [], "_next": self.first_change, "_stopped": False}

    def build(self) -> ds.Dataset:
        delta_table = _deltalake("DeltaSource").DeltaTable  # one line naming the extra, if missing
        try:
            table = delta_table(self.path, version=self.version, storage_options=self.storage_options)
        except Exception as exc:  # deltalake's own words ("No files in log segment") say little
            fs, root = resolve_uri(self.path)
            if (why := unreadable(fs, root, self.version)) is not None:
                raise EpochalError(f"DeltaSource: {self.path}: {why}; start a new job from a version it has") from exc
            raise
        return table.to_pyarrow_dataset()

    def discovery_interval(self) -> float | None:
        return self.poll_interval if self.follow else None

    def splits(self) -> Sequence[Any]:
        if not self.follow:
            return super().splits()
        first = [SnapshotSplit(s.split_id, s.path, s.row_group, s.rows, s.error, self.version)
                 for s in super().splits()] if self.snapshot else []
        fs, root = resolve_uri(self.path)
        while not self._stopped and (found := read_version(fs, root, self._next)) is not None:
            self._found.extend(self._version_splits(found))
            self._next += 1
        if not self._stopped and (missing := gone(fs, root, self._next)) is not None:
            self._found.extend(self._stop(self._next, f"DeltaSource: {self.path}: {missing}; start a new job from a "
                                                      "version it has (starting_version=...), or keep the log longer"))
        return first + self._found

    def resumed(self, restored: Sequence[Any]) -> None:
        """The job master restored a checkpoint's split log: go on after its last version."""
        if not self.follow:
            return
        versions = [s.version for s in restored if isinstance(s, (SnapshotSplit, VersionFileSplit))]
        if any(type(s) is RowGroupSplit for s in restored) and not versions:  # a checkpoint older than versions
            raise EpochalError(f"DeltaSource: {self.path}: the checkpoint does not say which version its snapshot "
                               "was read at; start a new job (starting_version=...)")
        if not versions:  # nothing of the table was read before that checkpoint: start as new
            return
        snapshots = {s.version for s in restored if isinstance(s, SnapshotSplit)}
        self.snapshot, self._dataset = False, None  # the snapshot's splits are in the log
        self.version = min(snapshots, default=self.version)
        self._found, self._next = [], max(versions) + 1
        self._stopped = any(getattr(s, "error", "") for s in restored)

    def _version_splits(self, version: Version) -> list[VersionFileSplit]:
        n, where = version.version, f"DeltaSource: version {version.version} of {self.path}"
        if version.schema is not None and json.loads(version.schema) != self._schema_json:
            return self._stop(n, f"{where} changes the table's schema; a running job reads one schema: "
                                "start a new job from that version (starting_version=...)")
        if version.removes and not version.adds and (self.ignore_deletes or self.skip_change_commits):
            return []
        if version.removes and self.skip_change_commits:
            return []
        if version.removes:
            return self._stop(n, f"{where} is not an append ({version.operation or 'a change'}: it removes "
                                f"{version.removes} file(s) with data); pass ignore_deletes=True to pass over "
                                "deletes or skip_change_commits=True to pass over every such version")
        dv = [a.path for a in version.adds if a.deletion_vector]
        if dv:
            return self._stop(n, f"{where} adds files with deletion vectors ({dv[0]}); they cannot be followed")
        return [VersionFileSplit(f"v{version.version}/{a.path}", version.version, a) for a in version.adds]

    def _stop(self, version: int, error: str) -> list[VersionFileSplit]:
        self._stopped = True
        return [VersionFileSplit(f"v{version}/<refused>", version, AddedFile("", (), 0, False), error)]

    def check(self) -> None:
        """Fail now on a version that cannot be followed, among those committed already."""
        if self.follow:
            refused = [s.error for s in self.splits() if isinstance(s, VersionFileSplit) and s.error]
            if refused:
                raise EpochalError(refused[0])

    def open_split(self, split: Any, position: Any | None) -> SplitReader:
        if isinstance(split, VersionFileSplit):
            return _VersionFileReader(self, split, position)
        if isinstance(split, SnapshotSplit) and split.version != self.version:  # a resumed job's snapshot
            self.version, self._dataset = split.version, None
        return super().open_split(split, position)

    def read_file(self, split: VersionFileSplit) -> pa.Table:
        """A version's data file as rows of the table's schema (its partition columns filled)."""
        fs, root = resolve_uri(self.path)
        path = split.file.path if "://" in split.file.path else f"{root.rstrip('/')}/{split.file.path}"
        try:
            data = pq.read_table(path, filesystem=fs if "://" not in split.file.path else None)
        except (FileNotFoundError, OSError) as exc:
            if isinstance(fs, pafs.FileSystem) and fs.get_file_info(path).type is pafs.FileType.NotFound:
                raise EpochalError(f"DeltaSource: {path} of version {split.version} is gone (vacuumed?)") from exc
            raise
        values = dict(split.file.partition_values)
        columns = []
        for field in self.schema:
            if field.name in values and field.name not in data.column_names:
                value = values[field.name]
                columns.append(pa.array([value] * data.num_rows, pa.string()).cast(field.type))
            elif field.name in data.column_names:
                columns.append(data.column(field.name).cast(field.type))
            else:
                columns.append(pa.nulls(data.num_rows, field.type))
        table = pa.Table.from_arrays(columns, schema=self.schema)
        return table.select(self.columns) if self.columns is not None else table


def _version_at(table: Any, when: Any) -> int:
    """The first version committed at or after `when` (seconds since the epoch, or a datetime)."""
    seconds = when.timestamp() if hasattr(when, "timestamp") else float(when)
    history = sorted(table.history(), key=lambda h: h["version"])
    for entry in history:
        if entry.get("timestamp", 0) >= seconds * 1000:
            return int(entry["version"])
    return table.version() + 1  # none yet: the next one
