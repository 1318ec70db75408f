"""What the job master checks once, on the driver, before the first attempt (and before Spark).

A job that cannot run (an input that is missing, an output directory that is not writable) or
must not (a fresh start over what an earlier run left) would fail the same way in every attempt,
after Spark's start-up, spending the restart budget; here it fails at once, in one line.

A *fresh start* (no `from_checkpoint`) over a checkpoint directory that holds complete
checkpoints is refused unless `CheckpointConfig.existing` is `"overwrite"`: the earlier run's
sinks committed output up to its latest checkpoint, and a fresh run would commit it all again.
Incomplete checkpoints alone are no obstacle and are deleted: a sink commits only once a
checkpoint is complete (dissertation §4.1.3), so a run that never completed one committed
nothing, and its staged output is never committed by anyone.

`from_checkpoint="auto"` (a job under a supervisor that restarts its driver) is decided here
too, once, before Spark: `auto_start` answers the latest complete checkpoint, or None for a fresh
start, which then passes every check above.

Sources and sinks check themselves (`Source.check`, `Sink.check`); the runtime calls the hooks
by name, since the job graph holds sources and sinks as plain objects. The checkpoint directory
must take a file (`check_checkpoint_directory`): one that exists but refuses writes would
otherwise fail the first checkpoint, an interval into the job, and every restart after it. On
Spark every operator must pickle (`check_picklable`): the stage ships them to its workers, and a
function that does not pickle (a lambda holding a lock) fails every launch the same way.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Iterable
from typing import Any

from ...errors import CheckpointError, EpochalError, NoCheckpointError
from ...plan.job_graph import JobGraph
from ...plan.specs import SinkSpec, SourceSpec
from ...state.manifest import Manifest
from ...state.storage import CheckpointStorage
from ..channel_state import IN_FLIGHT

log = logging.getLogger(__name__)


def check_sources(job: JobGraph) -> None:
    """Every source's `check()`: its input is there and readable."""
    for name, source in _connectors(job, SourceSpec, "source"):
        _call(name, "source", source.check)


def check_checkpoint_directory(storage: CheckpointStorage) -> None:
    """The checkpoint directory takes a file: one is written and deleted.

    Raises:
        CheckpointError: naming the directory and the filesystem's reason.
    """
    probe = f".epochal-write-check-{uuid.uuid4().hex}"
    try:
        storage.write(probe, b"")
    except CheckpointError as exc:
        where = storage.uri if "://" in storage.uri else storage.root
        reason = exc.__cause__ if exc.__cause__ is not None else exc
        raise CheckpointError(f"checkpoint directory {where} is not writable ({reason}): the job could not "
                              "checkpoint; fix its permissions or choose another (--checkpoint-dir)") from exc
    storage.delete_file(probe)


def check_picklable(job: JobGraph, dumps: Callable[[Any], Any]) -> None:
    """Every operator of `job` (its functions, sources and sinks) pickles with `dumps` (Spark's
    cloudpickle): the Spark host ships the job graph to its workers.

    Raises:
        EpochalError: naming the first operator that does not pickle, and why.
    """
    for vertex in job.vertices:
        for spec in vertex.chain:
            try:
                dumps(spec)
            except Exception as exc:  # noqa: BLE001 - any pickling failure is the user's object
                raise EpochalError(
                    f"operator {spec.name!r} cannot be sent to Spark's workers: it does not pickle "
                    f"({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}); a function it runs "
                    "holds something that cannot be copied to another process (a lock, an open file, a "
                    "connection): create that inside the function, or in open() of a process function"
                ) from exc


def check_sinks(job: JobGraph, resuming: bool) -> None:
    """Every sink's `check(resuming)`: its target is writable and holds no output it must not
    add to (a sink told to overwrite clears its old output here)."""
    for name, sink in _connectors(job, SinkSpec, "sink"):
        _call(name, "sink", lambda s=sink: s.check(resuming))
    for vertex in job.vertices:  # a sink that cannot run with this many writers says so now
        for spec in vertex.chain:
            if isinstance(spec, SinkSpec) and callable(getattr(spec.sink, "check_parallelism", None)):
                _call(spec.name, "sink", lambda s=spec.sink, p=vertex.parallelism: s.check_parallelism(p))


AUTO = "auto"  # from_checkpoint: the latest complete checkpoint if there is one, else a fresh start


def auto_start(job: JobGraph) -> Manifest | None:
    """What `from_checkpoint="auto"` means for `job` now: the newest complete checkpoint that is
    intact (`CheckpointStorage.latest`), or None (a fresh start) if there is none.

    The same command then does the right thing the first time and after every driver restart.
    A checkpoint directory that does not exist yet is a fresh start; one that cannot be listed
    raises (a store that is down must not look empty). A directory of corrupt checkpoints only
    is a fresh start here, which `checkpoints_to_clear` refuses unless `existing="overwrite"`.

    Raises:
        NoCheckpointError: the job has no checkpoint directory, so it could never resume.
    """
    config = job.config.checkpoint
    if config.directory is None:
        raise NoCheckpointError(
            'from_checkpoint="auto" needs a checkpoint directory to resume from: '
            "CheckpointConfig(directory=...) or epochal run --checkpoint-dir D"
        )
    try:
        storage = CheckpointStorage(config.directory, create=False, filesystem=config.filesystem)
    except NoCheckpointError:  # not created yet: no run has checkpointed here
        return None
    return storage.latest()


def describe_auto_start(job: JobGraph, start: Manifest | None) -> str:
    """The one line that says what `from_checkpoint="auto"` decided."""
    if start is None:
        where = job.config.checkpoint.directory
        return f"job {job.name!r}: no complete checkpoint in {where}: starting fresh (from_checkpoint='auto')"
    final = ", the final one of a run that finished" if start.is_final else ""
    return f"job {job.name!r}: resuming from checkpoint {start.checkpoint_id}{final} (from_checkpoint='auto')"


def checkpoints_to_clear(storage: CheckpointStorage, job: JobGraph) -> list[int]:
    """The checkpoints a fresh start deletes: incomplete leftovers, and complete ones if
    `existing="overwrite"`.

    Raises:
        CheckpointError: the directory holds complete checkpoints and `existing="error"`.
    """
    complete = storage.complete_checkpoints()
    if complete and job.config.checkpoint.existing == "error":
        latest = complete[-1]
        where = storage.uri if "://" in storage.uri else storage.root
        raise CheckpointError(
            f"checkpoint directory {where} already holds complete checkpoints of an earlier run "
            f"(latest: {latest}, {storage.checkpoint_dir_name(latest)}); resume it with "
            'from_checkpoint="latest" (epochal run --from-checkpoint latest), or let every run resume '
            'by itself with CheckpointConfig(resume="auto") (or --from-checkpoint auto), or start over with '
            'CheckpointConfig(existing="overwrite") or another checkpoint directory'
        )
    return storage.checkpoint_ids()


def clear_checkpoints(storage: CheckpointStorage, checkpoint_ids: list[int], job_name: str) -> None:
    """Delete the `chk-*` directories of `checkpoint_ids`, manifests first (so a deletion cut
    short leaves incomplete checkpoints, never a complete one with files missing)."""
    if not checkpoint_ids:
        return
    for checkpoint_id in checkpoint_ids:
        storage.delete_manifest(checkpoint_id)
    for checkpoint_id in checkpoint_ids:
        storage.discard(checkpoint_id)
    log.info(
        "job %r starts from scratch: deleted %d checkpoint(s) of an earlier run from %s",
        job_name, len(checkpoint_ids), storage.uri,
    )


def _connectors(job: JobGraph, kind: type[SourceSpec] | type[SinkSpec], attribute: str) -> list[tuple[str, Any]]:
    """(operator name, source or sink object) of each operator of `kind`, each object once."""
    found: dict[int, tuple[str, Any]] = {}
    for vertex in job.vertices:
        for spec in vertex.chain:
            if isinstance(spec, kind):
                obj = getattr(spec, attribute)
                if callable(getattr(obj, "check", None)):
                    found.setdefault(id(obj), (spec.name, obj))
    return list(found.values())


def _call(name: str, kind: str, check: Any) -> None:
    """Run one hook; a non-Epochal error is named after the operator, with its cause."""
    try:
        check()
    except EpochalError:
        raise
    except Exception as exc:
        raise EpochalError(f"{kind} {name!r} cannot start: {type(exc).__name__}: {exc}") from exc


def check_restored_operators(manifest: Manifest, uids: Iterable[str], allow_non_restored_state: bool) -> None:
    """Refuse a start whose checkpoint holds state of an operator the job no longer has.

    Operators are matched by uid; state nobody claims would be lost silently (Flink's rule).
    """
    known = set(uids)
    # an unaligned checkpoint's in-flight logs (`in_flight`) belong to the vertex that logged them
    orphans = sorted(op.uid for op in manifest.operators if op.uid.removesuffix(IN_FLIGHT) not in known)
    if orphans and not allow_non_restored_state:
        raise CheckpointError(
            f"checkpoint {manifest.checkpoint_id} holds state of operator(s) {orphans} that this job "
            "does not have; give the operators their old uids (stream.uid(...)), or start with "
            "allow_non_restored_state=True to drop that state"
        )
