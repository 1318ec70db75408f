"""One checkpoint file per worker: when a worker's merged file is complete, and what waits for it.

The tasks of one process (a Spark worker's, or every task of the in-process host) write their
snapshots into one merged file per checkpoint (`state.merged_files`, Flink's FLIP-306), so an
object store sees one PUT per worker and checkpoint instead of one per subtask and operator.
A task's write appends its segments as before, off the processing path; its acknowledgement
(the prepare phase of the epoch commit, dissertation §4.1.3) must wait until the file is whole
and in place, so the merger holds it until every task of the process has written its part of
the checkpoint (or declined it), closes the file on the background runner, and then sends them
all, each naming the merged file with its size and SHA-256 (`AcknowledgeCheckpoint.merged`).

Holding an acknowledgement delays no checkpoint: a checkpoint completes only once every task
acknowledged, and the last task of a process is one of them. Files are closed one at a time, in
the order their checkpoints became ready: a runner that finishes work out of order (the seeded
in-process host does) would otherwise release a newer checkpoint first, which then completes and
subsumes the older one, whose directory retention deletes under its pending rename. A checkpoint
that cannot complete any more (a newer one completed) is given up once its writes in flight are
done: its file is deleted, not renamed into place (nothing reads it, and its directory is
retention's), and its tasks acknowledge nothing (the coordinator dropped it already).
A task that writes after its checkpoint's file was closed writes files of its own, as without
merging; so does a synchronous checkpoint's write, which nothing may hold up.
"""

from __future__ import annotations

import logging
import posixpath
import threading
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from ...plan.job_graph import TaskId
from ...state.checked_files import chunks_of
from ...state.manifest import FileHandle, checkpoint_dir_name
from ...state.merged_files import MergedFileWriter, merged_name
from ...state.storage import CheckpointStorage
from .checkpointer import BackgroundRunner

log = logging.getLogger(__name__)

# Called once the merged file is in place (its handle, None if no task wrote a byte) or was
# given up (None and the reason).
Release = Callable[[FileHandle | None, str | None], None]


@dataclass(slots=True)
class _Checkpoint:
    """One checkpoint's merged file, as the tasks' thread sees it."""

    done: set[TaskId] = field(default_factory=set)  # tasks whose part is written (or declined)
    writing: int = 0  # writes submitted and not yet done
    held: list[Release] = field(default_factory=list)
    given_up: bool = False  # a newer checkpoint completed: this one never will
    closing: bool = False


class SegmentSink:
    """What a task's background write writes through: `write_file` as `CheckpointStorage`'s,
    appending to the checkpoint's merged file (`snapshots.write_task_snapshot`)."""

    def __init__(self, merger: SnapshotMerger) -> None:
        self._merger = merger

    def write_file(self, checkpoint_id: int, name: str, data: bytes | Iterable[bytes]) -> FileHandle:
        return self._merger._append(checkpoint_id, data)


class SnapshotMerger:
    """The merged files of one process's tasks.

    Args:
        storage: the job's checkpoint storage.
        background: the host's background runner, where files are closed.
        owner: names the files (`worker-3`, `inprocess`).
    """

    def __init__(self, storage: CheckpointStorage, background: BackgroundRunner, owner: str) -> None:
        self.storage = storage
        self.background = background
        self.owner = owner
        self.sink = SegmentSink(self)
        self._tasks: set[TaskId] = set()
        self._checkpoints: dict[int, _Checkpoint] = {}
        self._lock = threading.Lock()  # the writers: appended to off the tasks' thread
        self._writers: dict[int, MergedFileWriter] = {}
        self._closes: deque[tuple[Callable[[], Any], Callable[[Any], None]]] = deque()  # waiting their turn
        self._closing = False  # a close (or abandonment) is on the background runner
        self.files_written = 0
        self.files_abandoned = 0
        self.segments_written = 0

    # -- the tasks' thread -----------------------------------------------------------------------
    def register(self, task: TaskId) -> None:
        self._tasks.add(task)

    def unregister(self, task: TaskId) -> None:
        """`task` writes no more checkpoints (it finished, or closed)."""
        self._tasks.discard(task)
        for checkpoint_id, checkpoint in list(self._checkpoints.items()):
            checkpoint.done.discard(task)
            self._maybe_close(checkpoint_id, checkpoint)

    def started(self, checkpoint_id: int, task: TaskId) -> bool:
        """`task` writes its part of `checkpoint_id` now: True if into the merged file (through
        `sink`); False if that file is closed or closing already (it writes files of its own)."""
        checkpoint = self._checkpoints.setdefault(checkpoint_id, _Checkpoint())
        if checkpoint.closing:
            return False
        checkpoint.writing += 1
        return True

    def finished(self, checkpoint_id: int, task: TaskId, release: Release) -> None:
        """`task`'s write into the merged file ended; `release` once the file is in place."""
        checkpoint = self._checkpoints.get(checkpoint_id)
        if checkpoint is None:  # closed meanwhile (the attempt ended)
            return
        checkpoint.writing -= 1
        checkpoint.done.add(task)
        checkpoint.held.append(release)
        self._maybe_close(checkpoint_id, checkpoint)

    def failed(self, checkpoint_id: int, task: TaskId) -> None:
        """`task`'s write into the merged file failed (it declines the checkpoint)."""
        checkpoint = self._checkpoints.get(checkpoint_id)
        if checkpoint is None:
            return
        checkpoint.writing -= 1
        checkpoint.done.add(task)
        self._maybe_close(checkpoint_id, checkpoint)

    def declined(self, checkpoint_id: int, task: TaskId) -> None:
        """`task` will not write `checkpoint_id` into the merged file (its alignment was
        abandoned, or it writes a synchronous checkpoint's files of its own)."""
        checkpoint = self._checkpoints.setdefault(checkpoint_id, _Checkpoint())
        checkpoint.done.add(task)
        self._maybe_close(checkpoint_id, checkpoint)

    def completed(self, checkpoint_id: int) -> None:
        """`checkpoint_id` completed: no older checkpoint ever will; close theirs."""
        for older, checkpoint in list(self._checkpoints.items()):
            if older < checkpoint_id and not checkpoint.given_up:
                checkpoint.given_up = True
                self._maybe_close(older, checkpoint)

    def _maybe_close(self, checkpoint_id: int, checkpoint: _Checkpoint) -> None:
        if checkpoint.closing or checkpoint.writing:
            return
        if not checkpoint.given_up and len(checkpoint.done) < len(self._tasks):  # done: of registered tasks
            return
        checkpoint.closing = True
        with self._lock:
            writer = self._writers.get(checkpoint_id)
        if checkpoint.given_up:  # subsumed: the coordinator dropped it and may have deleted its directory
            del self._checkpoints[checkpoint_id]
            if writer is not None:
                self._in_turn(lambda: self._abandon(checkpoint_id), lambda _: None)
            return
        if writer is None or not writer.is_open:  # nothing was written: nothing to wait for
            self._closed(checkpoint_id, None)
            return
        self._in_turn(lambda: self._close(checkpoint_id), lambda result: self._closed(checkpoint_id, result))

    def _in_turn(self, work: Callable[[], Any], on_done: Callable[[Any], None]) -> None:
        """Run `work` on the background runner after the closes queued before it (module doc)."""
        self._closes.append((work, on_done))
        if not self._closing:
            self._next_close()

    def _next_close(self) -> None:
        if not self._closes:
            self._closing = False
            return
        self._closing = True
        work, on_done = self._closes.popleft()

        def done(result: Any) -> None:
            try:
                on_done(result)
            finally:
                self._next_close()

        self.background.submit(work, done)

    def _closed(self, checkpoint_id: int, result: FileHandle | str | None) -> None:
        checkpoint = self._checkpoints.pop(checkpoint_id, None)
        if checkpoint is None:  # the merger was closed meanwhile
            return
        if isinstance(result, str):  # its tasks decline: the coordinator warns if it was still pending
            log.info("%s: checkpoint %d's merged file failed: %s", self.owner, checkpoint_id, result)
            for release in checkpoint.held:
                release(None, result)
            return
        if result is not None:
            self.files_written += 1
        for release in checkpoint.held:
            release(result, None)

    def close(self) -> None:
        """The tasks are closed (the attempt ended): give every open file up."""
        self._checkpoints.clear()
        self._closes.clear()
        with self._lock:
            writers, self._writers = self._writers, {}
            for writer in writers.values():
                writer.abort()

    # -- the background runner -------------------------------------------------------------------
    def _append(self, checkpoint_id: int, data: bytes | Iterable[bytes]) -> FileHandle:
        storage = self.storage
        with self._lock:
            writer = self._writers.get(checkpoint_id)
            if writer is None:
                relative = posixpath.join(checkpoint_dir_name(checkpoint_id), merged_name(self.owner))
                writer = self._writers[checkpoint_id] = MergedFileWriter(storage, relative)
            if storage.on_write is None:
                handle = writer.append(data)
            else:
                chunks = list(chunks_of(data))  # the chained backups copy them too
                handle = writer.append(chunks)
                storage.on_write(checkpoint_id, handle, chunks)
            self.segments_written += 1
            return handle

    def _close(self, checkpoint_id: int) -> FileHandle | str:
        with self._lock:
            writer = self._writers.pop(checkpoint_id, None)
            if writer is None:
                return "the merged file was given up"
            try:
                return writer.close()
            except Exception as exc:
                return str(exc)

    def _abandon(self, checkpoint_id: int) -> None:
        with self._lock:
            writer = self._writers.pop(checkpoint_id, None)
            if writer is not None:
                writer.abort("a newer checkpoint completed")
                self.files_abandoned += 1
