"""Split enumeration on the job master: sources whose splits appear while the job runs.

A source whose `discovery_interval()` is not None (a watched directory) is listed by the job
master, every interval, and not by its subtasks: one listing of an object store per interval,
not one per subtask (Flink's split enumerator, FLIP-27). The splits it has not seen before are
appended to the source's *split log* in the order they were listed, and split `i` of the log is
read by subtask `i % parallelism`. The log only grows, so its owner rule holds across restarts
and, with the new parallelism, across rescales. When a live rescale may hand the source's splits
over (`runtime.splits`), every subtask is sent every split with its index in the log,
and keeps those `i % readers` is its own: the readers change at the rerouting barrier, which
reaches each subtask after the splits sent before its trigger and before those sent after, so
from checkpoint *n* on the new active count is the owner rule, and a restore re-sends the log to
subtasks that read by the table of the checkpoint restored.

Exactly once (dissertation §4.1.3; ChronoStream §III-B on progress as part of the snapshot): the
assignments travel to a source subtask on the same FIFO path as the coordinator's checkpoint
triggers, and every assignment due is sent before a trigger. So when checkpoint *n* is
triggered at log length *L*, its subtasks' states (positions and finished splits) cover exactly
the splits of the log's first *L* entries, no more and no fewer, and the checkpoint records *L*
and the log's entries with it. A restore re-sends the whole log to the new attempt's subtasks:
the restored positions say where each split resumes; a split found after the checkpoint was
triggered has none and is read from its start, since nothing it produced was committed.

The enumerator also tells the sources that wait for `NoMoreSplits` (`runtime.master.split_handovers`)
but whose splits cannot move in this job that none will come, first thing in an attempt.

The log is checkpointed incrementally: each complete checkpoint adds one segment file with the
entries found since the checkpoint before it, and lists the segments of that one too (shared
files, like incremental keyed state), so a directory of many files is not rewritten every second.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ...errors import CorruptCheckpointError
from ...plan.job_graph import JobGraph, TaskId
from ...plan.specs import SourceSpec
from ...state.manifest import FileHandle, Manifest, SplitLogState
from ...state.savepoints import storage_for
from ...state.snapshot_files import decode_operator_state, encode_operator_state
from ...state.storage import CheckpointStorage
from ..routing import handover_sources, routing_for
from ..splits import discovery_interval, may_gain_splits
from ..wire.messages import AssignSplits, NoMoreSplits

__all__ = ["SplitLog", "SplitEnumerators", "discovering_sources", "discovery_interval"]

log = logging.getLogger(__name__)

Send = Callable[[TaskId, object], None]


def discovering_sources(job: JobGraph) -> list[tuple[int, SourceSpec, float]]:
    """(vertex id, spec, discovery interval) of every source whose splits are found as it runs."""
    out = []
    for vertex in job.vertices:
        head = vertex.chain[0]
        if isinstance(head, SourceSpec) and (interval := discovery_interval(head.source)) is not None:
            out.append((vertex.id, head, float(interval)))
    return out


@dataclass(slots=True)
class SplitLog:
    """Every split one source's enumerator has found, in the order found."""

    uid: str
    vertex: int
    source: Any
    interval: float
    splits: list[Any] = field(default_factory=list)
    ids: set[str] = field(default_factory=set)
    # what the last complete checkpoint (or the one restored) holds of the log
    persisted: SplitLogState | None = None
    sent: int = 0  # entries this attempt's subtasks were sent
    next_discovery: float = -math.inf

    def add(self, splits: list[Any]) -> int:
        """Append the splits not seen before; how many were new."""
        before = len(self.splits)
        for split in splits:
            if split.split_id not in self.ids:
                self.ids.add(split.split_id)
                self.splits.append(split)
        return len(self.splits) - before

    def discover(self, now: float) -> None:
        """List the source again; a listing that fails is retried at the next interval."""
        self.next_discovery = now + self.interval
        try:
            found = list(self.source.splits())
        except Exception as exc:  # the job goes on with the splits it has (e.g. a flaky store)
            log.warning("source %r: listing its splits failed, retrying in %gs: %s", self.uid, self.interval, exc)
            return
        if new := self.add(found):
            log.info("source %r: %d new split(s), %d in all", self.uid, new, len(self.splits))

    def load(self, state: SplitLogState, storage: CheckpointStorage) -> None:
        """Start from the log of the checkpoint a job starts from."""
        restored: list[Any] = []
        for handle in state.segments:
            restored.extend(decode_operator_state(storage.read_file(handle), source=handle.label))
        if len(restored) != state.length:
            raise CorruptCheckpointError(
                f"source {self.uid!r}: the split log holds {len(restored)} splits, the manifest says {state.length}"
            )
        self.add(restored)
        if callable(resumed := getattr(self.source, "resumed", None)):  # e.g. a log source: the rest is new
            resumed(restored)

    def persist(self, storage: CheckpointStorage, checkpoint_id: int, length: int, name: str) -> SplitLogState:
        """The log's first `length` entries as of `checkpoint_id`: one new segment for the
        entries since the last complete checkpoint, after that checkpoint's segments."""
        base = self.persisted
        segments: tuple[FileHandle, ...] = base.segments if base is not None else ()
        start = base.length if base is not None else 0
        if length > start:
            segments += (storage.write_file(checkpoint_id, name, encode_operator_state(self.splits[start:length])),)
        return SplitLogState(self.uid, length, segments)


class SplitEnumerators:
    """The split logs of a job's discovering sources, kept by the job master across attempts."""

    def __init__(self, job: JobGraph, restore_from: Manifest | None, storage: CheckpointStorage | None) -> None:
        self.logs = [SplitLog(spec.uid, v, spec.source, interval) for v, spec, interval in discovering_sources(job)]
        self._parallelism = {v.id: v.active_parallelism for v in job.vertices}
        self._send: Send | None = None
        self._handover = handover_sources(job, storage is not None)
        self._subtasks = {v.id: v.parallelism for v in job.vertices}  # sent every split, with indices
        # sources that may wait for NoMoreSplits (`split_handover.may_gain_splits`): told in `flush`
        self._waiting = [v for v in job.vertices if v.is_source and v.active is not None]
        self._no_more: list[tuple[TaskId, NoMoreSplits]] = []
        if restore_from is not None:  # a job started from a checkpoint: its logs come first
            for split_log in self.logs:
                if (state := restore_from.split_log(split_log.uid)) is not None:
                    split_log.load(state, storage_for(restore_from, storage))

    def __bool__(self) -> bool:
        return bool(self.logs) or bool(self._waiting)

    def start_attempt(self, job: JobGraph, send: Send, restore_from: Manifest | None) -> None:
        """A new attempt: its subtasks are sent the whole log (first thing, before any trigger),
        with the attempt's parallelism; persisted segments build on the checkpoint restored."""
        self._send = send
        self._parallelism = {v.id: v.active_parallelism for v in job.vertices}
        routing = routing_for(job, restore_from)
        self._no_more = [(TaskId(v.id, s), NoMoreSplits(v.chain[0].uid)) for v in self._waiting
                         if may_gain_splits(v, routing) and v.id not in self._handover
                         and discovery_interval(getattr(v.chain[0], "source", None)) is None
                         for s in range(v.parallelism)]
        for split_log in self.logs:
            split_log.sent = 0
            split_log.persisted = restore_from.split_log(split_log.uid) if restore_from is not None else None

    def next_deadline(self) -> float | None:
        return min((s.next_discovery for s in self.logs), default=None)

    def tick(self, now: float) -> None:
        """List every source that is due, and send what was found."""
        for split_log in self.logs:
            if now >= split_log.next_discovery:
                split_log.discover(now)
        self.flush()

    def flush(self) -> None:
        """Send every split not yet sent in this attempt to the subtask that reads it."""
        if self._send is None:
            return
        for task, no_more in self._no_more:
            self._send(task, no_more)
        self._no_more = []
        for split_log in self.logs:
            parallelism = self._parallelism[split_log.vertex]
            new = split_log.splits[split_log.sent :]
            if not new:
                continue
            if split_log.vertex in self._handover:  # every subtask keeps its own (`split_handover`)
                every = AssignSplits(split_log.uid, tuple(new), tuple(range(split_log.sent, len(split_log.splits))))
                for subtask in range(self._subtasks[split_log.vertex]):
                    self._send(TaskId(split_log.vertex, subtask), every)
                split_log.sent = len(split_log.splits)
                continue
            by_subtask: dict[int, list[Any]] = {}
            for i, split in enumerate(new, start=split_log.sent):
                by_subtask.setdefault(i % parallelism, []).append(split)
            for subtask, splits in sorted(by_subtask.items()):
                self._send(TaskId(split_log.vertex, subtask), AssignSplits(split_log.uid, tuple(splits)))
            split_log.sent = len(split_log.splits)

    def mark(self) -> dict[str, int]:
        """At a trigger: send what is due first (FIFO ahead of the trigger), then the log
        lengths the checkpoint covers."""
        self.flush()
        return {split_log.uid: split_log.sent for split_log in self.logs}

    def persist(
        self, storage: CheckpointStorage | None, checkpoint_id: int, marks: dict[str, int]
    ) -> tuple[SplitLogState, ...]:
        """The logs as checkpoint `checkpoint_id` covers them (written before its manifest)."""
        if storage is None:
            return ()
        return tuple(
            split_log.persist(storage, checkpoint_id, marks.get(split_log.uid, 0), f"split-log-{i}")
            for i, split_log in enumerate(self.logs)
        )

    def completed(self, states: tuple[SplitLogState, ...]) -> None:
        """Checkpoint complete: later segments build on its logs."""
        for state in states:
            for split_log in self.logs:
                if split_log.uid == state.uid:
                    split_log.persisted = state

