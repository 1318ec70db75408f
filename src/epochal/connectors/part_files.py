"""The names of the part files one sink subtask writes, for the dissertation's temp file and
atomic move (§4.1.4) that `FileSink` and `ParquetSink` (partitioned or not) share: an epoch's
records go to a hidden staging file `.part-<subtask>-<token><staged suffix>`, renamed at its
checkpoint's commit to `part-<subtask>-<checkpoint>-<lineage>.<ext>`. The lineage (the run's,
`SinkWriter.set_lineage`) makes the final name the same when an epoch is replayed after a
fallback, so the replay finds its name taken and is skipped."""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass

import pyarrow.fs as pafs

from .arrow_files import delete_quietly


@dataclass(frozen=True, slots=True)
class PendingFile:
    """A closed staging file and the name it gets when its checkpoint commits."""

    staging: str
    final: str


@dataclass(frozen=True, slots=True)
class StagedName:
    """A staging file's path and the token that names it until the run has a lineage."""

    path: str
    token: str


class PartFiles:
    """One subtask's part files below `root`."""

    def __init__(self, fs: pafs.FileSystem, root: str, subtask: int, staged_suffix: str,
                 staging_pattern: re.Pattern[str]) -> None:
        self.fs, self.root, self.subtask = fs, root, subtask
        self.staged_suffix = staged_suffix  # ".inprogress", ".parquet.inprogress"
        self.staging_pattern = staging_pattern  # the base names of every staging file of the sink
        self.lineage = ""

    def set_lineage(self, lineage: str) -> None:
        self.lineage = lineage[:12]

    def new_staging(self, directory: str = "") -> StagedName:
        """A fresh staging file's name (in `directory` below the root: a partition)."""
        token = uuid.uuid4().hex[:12]
        return StagedName(f"{self._dir(directory)}/.part-{self.subtask:05d}-{token}{self.staged_suffix}", token)

    def pending(self, staged: StagedName, checkpoint_id: int, extension: str, directory: str = "") -> PendingFile:
        """The staged file and its name once `checkpoint_id` commits."""
        name = f"part-{self.subtask:05d}-{checkpoint_id:08d}-{self.lineage or staged.token}.{extension}"
        return PendingFile(staged.path, f"{self._dir(directory)}/{name}")

    def drop_uncommitted(self, recursive: bool = False) -> None:
        """Delete this subtask's staging files: no restored checkpoint committed them, so they hold
        records after it, which will be written again."""
        prefix = f".part-{self.subtask:05d}-"
        selector = pafs.FileSelector(self.root, allow_not_found=True, recursive=recursive)
        for info in self.fs.get_file_info(selector):
            if info.base_name.startswith(prefix) and self.staging_pattern.fullmatch(info.base_name):
                delete_quietly(self.fs, info.path)

    def _dir(self, directory: str) -> str:
        return f"{self.root}/{directory}" if directory else self.root
