"""A Delta table's commits, one version at a time, from its transaction log.

Each version `N` of a Delta table is one JSON-lines file, `_delta_log/<N as 20 digits>.json`,
written once and atomically (Delta protocol, "Delta Log Entries"): its `add` actions name the
data files the version adds (with their partition values), `remove` actions the files it takes
away, `metaData` a new schema, `commitInfo` the operation and time. Following a table is
reading the next version's file once it exists; nothing else of the log is needed.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from urllib.parse import unquote

import pyarrow.fs as pafs

LOG_DIR = "_delta_log"


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
