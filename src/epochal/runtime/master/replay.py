"""After a fallback to an older checkpoint: which epochs to replay at their cuts (`state.replay`).

The job master restores checkpoint `m` because the newer ones were refused (corrupt). The sinks
may have committed their epochs. If the first run's cut of a refused checkpoint `k` can still be
read (its manifest, or the copy that repairs it, and its sources' operator state files, each
checked against its checksum), the attempt replays epoch `k` at that cut and under that id, and
a sink idempotent per epoch skips it. The refused checkpoints' directories are removed first:
the replay writes checkpoint `k` anew.

A plan needs aligned barriers (unaligned and at-least-once checkpoints put no fixed cut through
the stream), the same parallelism as the refused checkpoints (a sink subtask's epochs are its
own), sources with a fixed list of splits (splits found as the job runs are assigned when found,
not at the cut) and records counted per split (checkpoints of a version that counted them). A
refused checkpoint whose cut cannot be read is not replayed at a cut: its output may be
committed again (said in the log), as before this existed.
"""

from __future__ import annotations

import dataclasses
import logging
from collections import deque
from collections.abc import Iterable

from ...errors import EpochalError
from ...plan.job_graph import JobGraph
from ...plan.specs import SourceSpec
from ...state.manifest import Manifest
from ...state.replay import EpochReplay, ReplayEpoch, SplitCut
from ...state.snapshot_files import decode_operator_state
from ...state.storage import CheckpointStorage
from ..splits import discovery_interval

log = logging.getLogger(__name__)


class Replays:
    """The cuts of the refused checkpoints, read once (their directories go then) and kept for
    every fallback to a checkpoint before them, until each is written anew by its replay."""

    def __init__(self, job: JobGraph, storage: CheckpointStorage | None) -> None:
        self.job = job
        self.storage = storage
        self.cuts: dict[int, ReplayEpoch] = {}
        self.lost: set[int] = set()  # refused checkpoints whose cuts cannot be kept

    def restore(self, restore: Manifest, refused: Iterable[int]) -> Manifest:
        """`restore`, with the epochs after it to replay at their cuts (`Manifest.replay`)."""
        newer = sorted(k for k in refused if k > restore.checkpoint_id and k not in self.lost)
        if self.storage is None or not newer:
            return restore
        why_not = _unsupported(self.job)
        if why_not is not None:
            log.warning("job %r: the epochs of checkpoint(s) %s are not replayed at their cuts (%s): what the "
                        "sinks committed of them can be committed again", self.job.name, newer, why_not)
            self.lost.update(newer)
            return restore
        for checkpoint_id in newer:
            if checkpoint_id in self.cuts:
                continue
            try:
                self.cuts[checkpoint_id] = _epoch(self.job, self.storage, checkpoint_id)
            except EpochalError as exc:  # corrupt beyond repair, or of another shape
                log.warning("job %r: checkpoint %d's cut cannot be read (%s): its epoch is replayed with the "
                            "next, and what the sinks committed of it can be committed again",
                            self.job.name, checkpoint_id, exc)
                self.lost.add(checkpoint_id)
                continue
            self.storage.discard(checkpoint_id)  # written anew by the replay
        epochs = tuple(self.cuts[k] for k in newer if k in self.cuts)
        if not epochs:
            return restore
        log.warning("job %r: replaying the epochs of checkpoint(s) %s at their cuts, from checkpoint %d: the "
                    "sinks skip what they committed of them", self.job.name, [e.checkpoint_id for e in epochs],
                    restore.checkpoint_id)
        return dataclasses.replace(restore, replay=EpochReplay(epochs))

    def completed(self, checkpoint_id: int) -> None:
        """Checkpoint `checkpoint_id` completed (anew): its cut is no longer needed."""
        self.cuts.pop(checkpoint_id, None)

    def abandoned(self, replay: EpochReplay | None) -> None:
        """A replayed epoch did not complete: these cuts are given up (the next restore replays
        without them, and what the sinks committed of those epochs can come again)."""
        for checkpoint_id in replay.checkpoint_ids if replay is not None else ():
            if self.cuts.pop(checkpoint_id, None) is not None:
                self.lost.add(checkpoint_id)


def _unsupported(job: JobGraph) -> str | None:
    mode = job.config.checkpoint.mode
    if mode not in ("aligned", "synchronous"):
        return f"{mode} checkpoints put no fixed cut through the stream"
    for vertex in job.vertices:
        head = vertex.chain[0]
        if isinstance(head, SourceSpec) and discovery_interval(head.source) is not None:
            return f"source {head.name!r} finds its splits as it runs"
    return None


def _epoch(job: JobGraph, storage: CheckpointStorage, checkpoint_id: int) -> ReplayEpoch:
    manifest = storage.load_manifest(checkpoint_id)  # repaired from its copy if need be
    parallelism = {spec.uid: vertex.parallelism for vertex in job.vertices for spec in vertex.chain}
    for op in manifest.operators:
        if op.uid in parallelism and op.parallelism != parallelism[op.uid]:
            raise EpochalError(f"operator {op.uid!r} ran at parallelism {op.parallelism} then")
    cuts = []
    for vertex in job.vertices:
        head = vertex.chain[0]
        if not isinstance(head, SourceSpec):
            continue
        source = manifest.operator(head.uid)
        if source is None:
            raise EpochalError(f"source {head.uid!r} is not in it")
        counts: dict[str, int] = {}
        finished: set[str] = set()
        for st in source.subtasks:
            if st.operator is None:
                raise EpochalError(f"source {head.uid!r} subtask {st.subtask} has no state in it")
            state = decode_operator_state(storage.read_file(st.operator), source=st.operator.path)
            if not hasattr(state, "counts"):
                raise EpochalError("its sources did not count their records")
            missing = set(state.positions) - set(state.counts)
            if missing:
                raise EpochalError(f"its sources did not count the records of {sorted(missing)[:3]}")
            counts.update(state.counts)
            finished |= state.finished
        cuts.append((head.uid, SplitCut(tuple(sorted(counts.items())), frozenset(finished))))
    return ReplayEpoch(checkpoint_id, tuple(cuts))


class ReplayedEpochs:
    """The epochs an attempt replays at their cuts (`Replays` chose them): the coordinator
    triggers them first, under their ids, in order, one at a time; one that is aborted loses its
    cut, and the cuts after it, so it fails the attempt."""

    def __init__(self, checkpoint_ids: Iterable[int] = ()) -> None:
        ids = tuple(checkpoint_ids)
        self._waiting: deque[int] = deque(sorted(ids))  # not triggered yet
        self._ids = frozenset(ids)

    def __bool__(self) -> bool:
        """Whether an epoch is still to be triggered."""
        return bool(self._waiting)

    def __contains__(self, checkpoint_id: int) -> bool:
        """Whether `checkpoint_id` is an epoch replayed at its cut."""
        return checkpoint_id in self._ids

    def next(self) -> int:
        """The id of the next epoch to trigger."""
        return self._waiting.popleft()
