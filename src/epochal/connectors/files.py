"""FileSink: JSON lines in `part-*` files, committed exactly once per checkpoint.

The dissertation's temp-file-and-atomic-move sink (§4.1.4): each subtask writes a hidden
staging file (`.part-…inprogress`); at a checkpoint it is closed and fsynced, and its name pair
becomes the subtask's committable; when the checkpoint completes the file is renamed to its
visible `part-…` name. A reader that skips names starting with `.` or `_` never sees
uncommitted records. Renames are idempotent, so commits repeated after a failure are harmless.

A fresh run cannot know what an earlier run committed into the same directory, so before the job
starts (`FileSink.check`) the sink's `mode` decides, as Spark's save modes do: `"error"` refuses
a directory that holds committed `part-*` files, `"overwrite"` deletes the files a FileSink wrote
there (and nothing else), `"append"` adds to them. A resumed job is never refused: its own
committed output is expected.
"""

from __future__ import annotations

import json
import logging
import os
import re
import tempfile
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, cast

from ..api.connector import Sink, SinkWriter
from ..config import check_callable, check_choice, check_path
from ..errors import CheckpointError, EpochalError
from ..runtime.batches import to_records
from ..runtime.elements import Batch

log = logging.getLogger(__name__)

FileSinkMode = Literal["error", "overwrite", "append"]
MODES: tuple[FileSinkMode, ...] = ("error", "overwrite", "append")

# The names `_FileWriter` gives its files: only these are ever deleted by "overwrite".
_COMMITTED = re.compile(r"part-\d{5,}-\d{8,}-[0-9a-f]{12}\.jsonl")
_STAGING = re.compile(r"\.part-\d{5,}-[0-9a-f]{12}\.inprogress")
_SHOWN = 3  # committed files a refusal names


@dataclass(frozen=True, slots=True)
class PendingFile:
    """A closed staging file and the name it gets when its checkpoint commits."""

    staging: str
    final: str


def _default_encode(record: Any) -> str:
    return json.dumps(record, separators=(",", ":"), ensure_ascii=False)


class _FileWriter(SinkWriter):
    def __init__(self, directory: str, subtask: int, encode: Callable[[Any], str]) -> None:
        self.directory = directory
        self.subtask = subtask
        self.encode = encode
        self._file: Any = None
        self._staging = ""
        self._token = ""

    def _open(self) -> None:
        self._token = uuid.uuid4().hex[:12]
        self._staging = os.path.join(self.directory, f".part-{self.subtask:05d}-{self._token}.inprogress")
        self._file = open(self._staging, "w", encoding="utf-8")

    def write(self, batch: Batch) -> None:
        if self._file is None:
            self._open()
        encode = self.encode
        self._file.write("".join(encode(r) + "\n" for r in to_records(batch)))

    def prepare_commit(self, checkpoint_id: int) -> PendingFile | None:
        if self._file is None:
            return None
        self._file.flush()
        os.fsync(self._file.fileno())
        self._file.close()
        self._file = None
        final = os.path.join(self.directory, f"part-{self.subtask:05d}-{checkpoint_id:08d}-{self._token}.jsonl")
        return PendingFile(self._staging, final)

    def recover(self) -> None:
        # Staging files of this subtask index that no restored checkpoint committed hold records
        # after that checkpoint: they will be written again, so drop them.
        prefix = f".part-{self.subtask:05d}-"
        for name in os.listdir(self.directory):
            if name.startswith(prefix) and name.endswith(".inprogress"):
                try:
                    os.remove(os.path.join(self.directory, name))
                except FileNotFoundError:
                    pass

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


class FileSink(Sink):
    """Writes records as JSON lines (tuples as arrays) to `part-*` files in a directory.

    Args:
        directory: where the files go (created if missing).
        encode: turns a record into one line of text (default: compact JSON).
        mode: what a job that does not resume from a checkpoint does with committed `part-*`
            files already in `directory`: `"error"` (the default, Spark's `errorIfExists`)
            refuses to start; `"overwrite"` deletes the files a FileSink wrote there (other
            files stay); `"append"` adds new files beside them. A resumed job keeps its output
            whatever the mode.

    Files appear only when the checkpoint that covers them completes; with no periodic
    checkpoints, when the job ends.
    """

    def __init__(
        self,
        directory: str | os.PathLike[str],
        encode: Callable[[Any], str] | None = None,
        *,
        mode: FileSinkMode = "error",
    ) -> None:
        self.directory = os.path.abspath(check_path("directory", directory))
        self.encode = _default_encode if encode is None else check_callable("encode", encode)
        self.mode = cast(FileSinkMode, check_choice("mode", mode, MODES))

    def check(self, resuming: bool) -> None:
        """Fail now if the directory is not writable, or (on a fresh start, mode "error") holds
        committed output; mode "overwrite" deletes that output here."""
        _check_writable(self.directory)
        if resuming or self.mode == "append":
            return
        names = sorted(os.listdir(self.directory))
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
            try:
                os.remove(os.path.join(self.directory, name))
            except FileNotFoundError:
                pass
        if doomed:
            log.info("FileSink: removed %d file(s) of an earlier run from %s", len(doomed), self.directory)
        foreign = [n for n in names if n.startswith("part-") and not _COMMITTED.fullmatch(n)]
        if foreign:
            log.warning("FileSink: %s holds part-* files it did not write (kept): %s", self.directory, foreign[:_SHOWN])

    def create_writer(self, subtask: int, parallelism: int) -> SinkWriter:
        os.makedirs(self.directory, exist_ok=True)
        return _FileWriter(self.directory, subtask, self.encode)

    def commit(self, committables: list[Any]) -> None:
        for pending in committables:
            if os.path.exists(pending.staging):
                os.replace(pending.staging, pending.final)
            elif not os.path.exists(pending.final):
                raise CheckpointError(
                    f"FileSink: staged file {pending.staging} is gone and {pending.final} does not exist"
                )
        _fsync_dir(self.directory)


def _check_writable(directory: str) -> None:
    """Create `directory` if needed and write (then delete) a hidden probe file in it."""
    try:
        os.makedirs(directory, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=".epochal-probe-", dir=directory)
        os.close(fd)
        os.remove(probe)
    except OSError as exc:
        raise EpochalError(f"FileSink: cannot write to {directory}: {exc.strerror or exc}") from exc


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


def read_committed(directory: str) -> list[Any]:
    """Every record in the committed `part-*` files of a FileSink directory (hidden files skipped)."""
    records: list[Any] = []
    for name in sorted(os.listdir(directory)):
        if name.startswith("part-"):
            with open(os.path.join(directory, name), encoding="utf-8") as f:
                records.extend(json.loads(line) for line in f if line.strip())
    return records
