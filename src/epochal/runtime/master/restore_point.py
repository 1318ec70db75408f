"""Which checkpoint an attempt restores, every byte of it verified on the job master first.

A restore is spread over the tasks, and a sink subtask commits the output its restored state
holds for the checkpoint (dissertation §4.1.3: a complete checkpoint's committables are
committed on restore, so a commit cut short by a failure is finished). If another subtask then
found its own state file corrupt, the attempt failed after that commit, the job fell back to
the checkpoint before, and replayed the committed epoch: output twice. So nothing of a
checkpoint is handed to a task until the job master has read every file it lists against the
manifest's SHA-256 (`state.verify`), before any task starts; a corrupt checkpoint is refused
whole, and nothing it holds is ever committed.

- `"latest"` (and `"auto"`, which resolves to it) falls back past corrupt checkpoints to the
  newest that verifies, and says which it refused (`RefusedCheckpoint`, in the `JobResult`;
  `epochal run` exits with status 3).
- A checkpoint named by id or path is restored as named or not at all: a corrupt one is an
  error (`CorruptCheckpointError`), in one line, before Spark starts.
- A savepoint is verified as it is copied in (`savepoints.adopt`).
- After a failure, the job master restores the newest checkpoint of the run that verifies
  (`FailureManager.latest_restorable`; also when survivors restore only the lost workers), through `verified` here.
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass

from ...errors import CorruptCheckpointError, NoCheckpointError
from ...plan.job_graph import JobGraph
from ...state.manifest import Manifest
from ...state.savepoints import adopt, load_savepoint
from ...state.storage import CheckpointStorage
from ...state.verify import verify_checkpoint
from ..channel_state import check_in_flight
from ..result import RefusedCheckpoint

log = logging.getLogger(__name__)

LATEST = "latest"


@dataclass(frozen=True, slots=True)
class RestorePoint:
    """The checkpoint to restore, and the newer ones refused on the way to it."""

    manifest: Manifest
    refused: tuple[RefusedCheckpoint, ...] = ()
    adopted: bool = False  # a savepoint copied in: no older checkpoint of the directory is its ancestor


def verified(storage: CheckpointStorage, checkpoint_id: int) -> Manifest:
    """The manifest of complete checkpoint `checkpoint_id`, once every file it lists was read and
    matched its size and SHA-256.

    Raises:
        CorruptCheckpointError: the manifest or a file is corrupt, truncated or missing.
        NoCheckpointError: the checkpoint is not complete (or was dropped by retention).
    """
    manifest = storage.load_manifest(checkpoint_id)
    storage.check_files(manifest)  # metadata first: a missing file costs no reading
    verify_checkpoint(storage, manifest)
    return manifest


def newest_verified(storage: CheckpointStorage, candidates: list[int]) -> RestorePoint | None:
    """The newest of `candidates` (complete checkpoint ids) that verifies, and those refused."""
    refused: list[RefusedCheckpoint] = []
    for checkpoint_id in sorted(candidates, reverse=True):
        try:
            manifest = verified(storage, checkpoint_id)
        except CorruptCheckpointError as exc:  # the caller says which it restores instead
            refused.append(RefusedCheckpoint(checkpoint_id, str(exc)))
            continue
        except NoCheckpointError:  # dropped by retention meanwhile
            continue
        return RestorePoint(manifest, tuple(refused))
    return None


def resolve(storage: CheckpointStorage, which: str | int) -> RestorePoint:
    """What `from_checkpoint=which` restores: see the module's docstring.

    Raises:
        NoCheckpointError: nothing of that name, or (`"latest"`) no complete checkpoint that verifies.
        CorruptCheckpointError: the checkpoint named by id or path is corrupt.
    """
    if which == LATEST:
        complete = storage.complete_checkpoints()
        point = newest_verified(storage, complete)
        if point is None:
            corrupt = f" that verifies ({len(complete)} complete, each corrupt)" if complete else ""
            raise NoCheckpointError(f"no complete checkpoint in {storage.uri!r}{corrupt}")
        return point
    if isinstance(which, str) and not which.isdigit():
        savepoint = load_savepoint(which)
        if savepoint is not None:  # copied in as the next checkpoint, each file verified as it is copied
            return RestorePoint(adopt(storage, savepoint), adopted=True)
    manifest = storage.resolve(which)
    try:
        verify_checkpoint(storage, manifest)
    except CorruptCheckpointError as exc:
        raise CorruptCheckpointError(
            f"{exc}; checkpoint {manifest.checkpoint_id} cannot be restored: start from an older one "
            f"(from_checkpoint={LATEST!r} takes the newest that verifies)"
        ) from exc
    return RestorePoint(manifest)


def start_point(storage: CheckpointStorage | None, job: JobGraph, which: str | int, standby: bool) -> RestorePoint:
    """What a job started with `from_checkpoint=which` restores (`resolve`), checked against the
    job; `standby`: the job runs standby subtasks (a checkpoint of a live rescale then restores
    at the parallelism the job is given now).

    Raises:
        NoCheckpointError: as `resolve`, or the job has no checkpoint directory.
        CorruptCheckpointError: as `resolve`.
    """
    if storage is None:
        raise NoCheckpointError("from_checkpoint needs CheckpointConfig(directory=...)")
    point = resolve(storage, which)
    manifest = point.manifest
    check_in_flight(manifest, job)
    table = manifest.routing
    if table is not None and standby and table.active != job.parallelism:
        # the job was rescaled live since; it starts at the parallelism it is given now
        log.info("job %r: checkpoint %d ran at parallelism %d; starting at %d", job.name,
                 manifest.checkpoint_id, table.active, job.parallelism)
        manifest = dataclasses.replace(manifest, routing=None)
    if point.refused:
        log.warning("job %r: checkpoint(s) %s refused as corrupt; restoring checkpoint %d (%s)", job.name,
                    [r.checkpoint_id for r in point.refused], manifest.checkpoint_id, point.refused[0].reason)
    log.info("job %r restores checkpoint %d", job.name, manifest.checkpoint_id)
    return dataclasses.replace(point, manifest=manifest)
