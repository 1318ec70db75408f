"""A Delta table's commits, one version at a time, from its transaction log.

Each version `N` of a Delta table is one JSON-lines file, `_delta_log/<N as 20 digits>.json`,
written once and atomically (Delta protocol, "Delta Log Entries"): its `add` actions name the
data files the version adds (with their partition values), `remove` actions the files it takes
away, `metaData` a new schema, `commitInfo` the operation and time. Following a table is
reading the next version's file once it exists.

Log cleanup (`delta.logRetentionDuration`, 30 days by default; delta-rs's `cleanup_metadata`,
Spark's checkpoints) deletes the JSON of versions older than a checkpoint
(`_delta_log/<N>.checkpoint.parquet`, named by `_delta_log/_last_checkpoint`). A missing JSON is
then not a version to wait for but one that is gone: `gone` tells the two apart with the last
checkpoint's version (versions are contiguous, so a checkpoint at or after `N` means `N` was
committed), one small read only while no new version has come.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from urllib.parse import unquote

import pyarrow.fs as pafs

LOG_DIR = "_delta_log"
_COMMIT = re.compile(r"^(\d{20})\.json$")
_CHECKPOINT = re.compile(r"^(\d{20})\.checkpoint(\.\d+\.\d+)?\.parquet$")


@dataclass(frozen=True, slots=True)
class AddedFile:
    """A data file a version added: its path under the table root, and its partition values."""

    path: str
    partition_values: tuple[tuple[str, str | None], ...]
    rows: int | None  # from the file's stats, if the writer kept them
    deletion_vector: bool


@dataclass(frozen=True, slots=True)
class Version:
    """What one commit did, as far as a reader of new rows cares."""

    version: int
    timestamp_ms: int
    operation: str
    adds: tuple[AddedFile, ...]  # the files with new data (dataChange)
    removes: int  # files taken away with their data (dataChange): deletes, updates, overwrites
    schema: str | None  # a new schema (a metaData action), as Delta's JSON schema string

    @property
    def is_append(self) -> bool:
        return self.removes == 0 and self.schema is None


def commit_path(root: str, version: int) -> str:
    return f"{root.rstrip('/')}/{LOG_DIR}/{version:020d}.json"


def read_version(fs: pafs.FileSystem, root: str, version: int) -> Version | None:
    """Version `version` of the table at `root`, or None if it was not committed (yet)."""
    try:
        with fs.open_input_stream(commit_path(root, version)) as f:
            text = f.read().decode("utf-8")
    except FileNotFoundError:
        return None
    except OSError as exc:  # some filesystems say "not found" in their own words
        if fs.get_file_info(commit_path(root, version)).type is pafs.FileType.NotFound:
            return None
        raise exc
    return parse_version(version, text)


def last_checkpoint(fs: pafs.FileSystem, root: str) -> int | None:
    """The version of the table's last checkpoint, as `_delta_log/_last_checkpoint` says; None
    if it has none (or the hint does not read)."""
    try:
        with fs.open_input_stream(f"{root.rstrip('/')}/{LOG_DIR}/_last_checkpoint") as f:
            return int(json.loads(f.read().decode("utf-8"))["version"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


@dataclass(frozen=True, slots=True)
class LogExtent:
    """The versions a table's log still has: its commits' JSON and its checkpoints."""

    commits: tuple[int, ...]
    checkpoints: tuple[int, ...]

    def readable(self, version: int) -> bool:
        """Whether the table can still be read at `version`: from its first commit, or from a
        checkpoint at or before it, with every commit after that checkpoint."""
        base = max((c for c in self.checkpoints if c <= version), default=None)
        if base == version:
            return True
        start = 0 if base is None else base + 1  # the first commit to replay (cleanup keeps a suffix)
        return version in self.commits and min(self.commits) <= start

    def describe(self) -> str:
        oldest = min(self.commits, default=min(self.checkpoints, default=-1))
        return (f"the oldest version the log still has is {oldest} "
                f"(oldest checkpoint: {min(self.checkpoints) if self.checkpoints else 'none'})")


def log_extent(fs: pafs.FileSystem, root: str) -> LogExtent:
    commits, checkpoints = [], []
    for info in fs.get_file_info(pafs.FileSelector(f"{root.rstrip('/')}/{LOG_DIR}")):
        if m := _COMMIT.match(info.base_name):
            commits.append(int(m.group(1)))
        elif m := _CHECKPOINT.match(info.base_name):
            checkpoints.append(int(m.group(1)))
    return LogExtent(tuple(sorted(commits)), tuple(sorted(checkpoints)))


def gone(fs: pafs.FileSystem, root: str, version: int) -> str | None:
    """None if `version`'s JSON is only not written yet; else, the version being gone from the
    log (cleaned up), one line saying which versions the log still has."""
    checkpoint = last_checkpoint(fs, root)
    if checkpoint is None or checkpoint < version:
        return None
    extent = log_extent(fs, root)
    if version in extent.commits:  # written meanwhile, between the two looks
        return None
    return (f"version {version} is no longer in the table's log: {LOG_DIR}/{version:020d}.json was cleaned up "
            f"(log retention, delta.logRetentionDuration); {extent.describe()}")


def unreadable(fs: pafs.FileSystem, root: str, version: int) -> str | None:
    """None if the log can still rebuild the table at `version`; else one line saying why not."""
    extent = log_extent(fs, root)
    if extent.readable(version):
        return None
    return (f"the table can no longer be read at version {version}: log cleanup (delta.logRetentionDuration) "
            f"deleted the log before it; {extent.describe()}")


def parse_version(version: int, text: str) -> Version:
    adds: list[AddedFile] = []
    removes = 0
    schema: str | None = None
    operation, timestamp = "", 0
    for line in text.splitlines():
        if not line.strip():
            continue
        action = json.loads(line)
        if "add" in action:
            add = action["add"]
            if add.get("dataChange", True):
                rows = None
                if add.get("stats"):
                    rows = json.loads(add["stats"]).get("numRecords")
                values = tuple(sorted((add.get("partitionValues") or {}).items()))
                adds.append(AddedFile(unquote(add["path"]), values, rows, bool(add.get("deletionVector"))))
        elif "remove" in action:
            removes += bool(action["remove"].get("dataChange", True))
        elif "metaData" in action:
            schema = action["metaData"].get("schemaString")
        elif "commitInfo" in action:
            info = action["commitInfo"]
            operation, timestamp = str(info.get("operation", "")), int(info.get("timestamp", 0))
    return Version(version, timestamp, operation, tuple(sorted(adds, key=lambda a: a.path)), removes, schema)
