"""The failure manager: after a failed attempt, restart from which checkpoint, or give up.

Rollback recovery (dissertation §4.1.3.1): any failure of an attempt (a task's error, a lost
worker, too many failed checkpoints) stops it, and the next attempt restores the latest complete
checkpoint of the job's own lineage, until the restart budget (`RestartStrategy`) is spent, or
until the same record fails the same way on two attempts in a row (a poison pill fails again on
every attempt, so retrying it only repeats the traceback; so too a Spark stage whose tasks
raise the same error before they start). Every byte of the checkpoint to restore is verified
before the next attempt's tasks start (`restore_point.verified`): a corrupt one is refused for
good, and the one before it is used; `refused_reasons` says which and why, for the `JobResult`.
"""

from __future__ import annotations

import logging
from collections.abc import Collection

from ...errors import CorruptCheckpointError, JobFailedError, NoCheckpointError, RecordError
from ...plan.job_graph import JobGraph
from ...state.manifest import Manifest
from ...state.storage import CheckpointStorage
from ..result import RefusedCheckpoint
from .restore_point import verified

log = logging.getLogger(__name__)


class FailureManager:
    """The restart budget, the failures so far, and the choice of what to restore.

    Args:
        job: the job graph (its name and `RestartStrategy`).
        storage: the job's checkpoint storage; None restarts from scratch.
        started_from: the checkpoint the run started from, if any: it and its ancestors are of
            this job's lineage.
        oldest_ancestor: the oldest checkpoint of the lineage before `started_from` (a savepoint
            adopted into the directory has no older ancestors there).
        refused: checkpoints refused as corrupt at the start (newer than `started_from`).
    """

    def __init__(self, job: JobGraph, storage: CheckpointStorage | None, started_from: int | None,
                 oldest_ancestor: int, refused: tuple[RefusedCheckpoint, ...] = ()) -> None:
        self.job = job
        self.storage = storage
        self.started_from = started_from
        self.oldest_ancestor = oldest_ancestor
        self.restarts = 0
        self.failures: list[str] = []
        self.refused: set[int] = {r.checkpoint_id for r in refused}  # found corrupt: never restored again
        self.refused_reasons: list[RefusedCheckpoint] = list(refused)  # and why
        self._last_failure: tuple[str, str, str] | None = None  # the previous attempt's record failure

    def failed(self, cause: BaseException, attempt: int, restoring: Manifest | None) -> None:
        """Attempt `attempt`, which restored `restoring`, failed with `cause`: count it.

        Raises:
            JobFailedError: the budget is spent, or the failure recurs; its cause is `cause`.
        """
        self.failures.append(f"{type(cause).__name__}: {cause}")
        log.warning("job %r: %s failed: %s", self.job.name, f"attempt {attempt}" if attempt else "the start", cause)
        if isinstance(cause, CorruptCheckpointError) and restoring is not None:  # changed since it was verified
            self.refused.add(restoring.checkpoint_id)
            self.refused_reasons.append(RefusedCheckpoint(restoring.checkpoint_id, str(cause)))
        recurring = self._recurs(cause)
        if recurring or self.restarts >= self.job.config.restart.max_restarts:
            raise JobFailedError(self.job.name, self.restarts + 1, cause, recurring) from cause
        self.restarts += 1

    def _recurs(self, cause: BaseException) -> bool:
        """Whether this attempt failed on the same record, in the same operator, with the same
        exception type as the one before: user code failing deterministically (a poison pill)
        would fail every further attempt the same way."""
        fingerprint = _record_failure(cause)
        previous, self._last_failure = self._last_failure, fingerprint
        return fingerprint is not None and fingerprint == previous

    def latest_restorable(self, completed: Collection[int]) -> Manifest | None:
        """The newest complete checkpoint of this job's own lineage that is not refused.

        The lineage is what this run `completed`, and, when it started from a checkpoint, that
        one and those before it (for an adopted savepoint, only itself). A checkpoint directory
        may hold newer checkpoints of an earlier run (the job was started from an older one):
        restoring one of those would mix two histories. None restarts from scratch.
        """
        if self.storage is None:
            return None
        start = self.started_from
        ancestors = range(self.oldest_ancestor, start + 1) if start is not None else range(0)
        lineage = sorted({cid for cid in self.storage.complete_checkpoints() if cid in completed or cid in ancestors})
        for checkpoint_id in reversed(lineage):
            if checkpoint_id in self.refused:
                continue
            try:
                manifest = verified(self.storage, checkpoint_id)  # every byte, before a task sees it
            except CorruptCheckpointError as exc:
                log.warning("job %r: checkpoint %d refused: %s", self.job.name, checkpoint_id, exc)
                self.refused.add(checkpoint_id)
                self.refused_reasons.append(RefusedCheckpoint(checkpoint_id, str(exc)))
                continue
            except NoCheckpointError:  # dropped by retention meanwhile
                continue
            if self.refused:
                newer = sorted(c for c in self.refused if c > checkpoint_id)
                log.warning(
                    "job %r: checkpoint(s) %s refused as corrupt; restoring checkpoint %d%s",
                    self.job.name, sorted(self.refused), checkpoint_id,
                    f" (the sinks may have committed the output of checkpoint(s) {newer}: replayed from "
                    f"checkpoint {checkpoint_id}, it can appear twice)" if newer else "",
                )
            return manifest
        return None


def _record_failure(cause: BaseException | None) -> tuple[str, str, str] | None:
    """The fingerprint of the user-code failure on a record behind `cause` (it, or what it wraps),
    or of a host's failure that repeats itself (a Spark stage whose tasks cannot start)."""
    for _ in range(8):  # a short chain of causes: a host may wrap the task's error
        if cause is None:
            return None
        if isinstance(cause, RecordError):
            return cause.fingerprint
        fingerprint = getattr(cause, "fingerprint", None)
        if isinstance(fingerprint, tuple):
            return fingerprint
        cause = cause.__cause__
    return None
