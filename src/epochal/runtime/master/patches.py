"""The job master's live logic patches: staging, the switching checkpoint, and the record that
makes a patch survive a failure (the protocol: `runtime.patches`).

One patch is under way at a time. It is *staged* at every subtask of its operator, which load
and check the function and answer (`PatchStaged`); once all did, a checkpoint is triggered
whose barrier carries the patch, and every checkpoint from that one on records it in its
manifest (the function pickled in a file of the checkpoint where it first appears). The patch
command finishes when that checkpoint completes; it fails when a subtask refused the function,
and when the checkpoint aborted or the attempt ended before it completed (some subtasks may
have switched: the job then restores the checkpoint before, with the old function).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from ...errors import CheckpointError, EpochalError
from ...plan.job_graph import JobGraph, TaskId
from ...state.manifest import Manifest, PatchState
from ...state.storage import CheckpointStorage
from ..commands import Patch, Ticket
from ..patches import check_function, dump_function
from ..wire.messages import DropPatch, PatchStaged, StagePatch

log = logging.getLogger(__name__)

Send = Callable[[TaskId, object], None]


@dataclass(slots=True)
class _UnderWay:
    """A patch being staged, or waiting for the checkpoint that switches to it."""

    patch_id: int
    uid: str
    payload: bytes
    ticket: Ticket[int]
    awaiting: set[TaskId]
    tasks: tuple[TaskId, ...]
    checkpoint: int | None = None  # the checkpoint whose barrier carries it, once triggered
    refusals: list[str] = field(default_factory=list)


class PatchLog:
    """The patches in effect (by operator uid) and the one under way, across attempts.

    Args:
        job: the job graph: which operators exist and which subtasks run them.
        restore_from: the checkpoint the job starts from: its patches are in effect.
    """

    def __init__(self, job: JobGraph, restore_from: Manifest | None) -> None:
        self.job = job
        self.active: dict[str, PatchState] = {}
        self._written: dict[int, PatchState] = {}  # patch id -> its record, once its file exists
        self._payloads: dict[int, tuple[str, bytes]] = {}  # patch id -> (uid, payload) not yet written
        self.under_way: _UnderWay | None = None
        self.switch_id = 0  # the newest patch a barrier carries from now on
        self._next_id = 1
        self.restored(restore_from)

    def restored(self, manifest: Manifest | None) -> None:
        """An attempt starts from `manifest`: its patches are in effect, and only they."""
        self.active = {p.uid: p for p in manifest.patches} if manifest is not None else {}
        self._written = {p.patch_id: p for p in self.active.values()}
        self._payloads = {}
        self.switch_id = max(self._written, default=0)
        self._next_id = max(self._next_id, self.switch_id + 1)

    # -- a new patch -----------------------------------------------------------------------------
    def submit(self, ticket: Ticket[int], send: Send | None, storage: CheckpointStorage | None,
               ending: bool) -> None:
        """Check a patch command and stage it at its operator's subtasks (or fail the ticket)."""
        command = ticket.command
        assert isinstance(command, Patch)
        try:
            if send is None or ending:
                raise EpochalError(f"job {self.job.name!r} is not running; no patch")
            if storage is None:
                raise EpochalError("a patch needs CheckpointConfig(directory=...): a restore must find it")
            if self.under_way is not None:
                raise EpochalError(f"patch {self.under_way.patch_id} of {self.under_way.uid!r} is under way; "
                                   "one patch at a time")
            found = [(v, op) for v in self.job.vertices for op in v.chain if op.uid == command.uid]
            if not found:
                raise EpochalError(f"no operator with uid {command.uid!r} in job {self.job.name!r}")
            vertex, spec = found[0]
            check_function(spec, command.function)
            payload = dump_function(command.function)
        except (EpochalError, TypeError) as exc:
            ticket.fail(exc)
            return
        except Exception as exc:  # noqa: BLE001 - pickling can raise anything: the patch is refused
            ticket.fail(EpochalError(f"the patch of {command.uid!r} does not pickle: {type(exc).__name__}: {exc}"))
            return
        patch_id, self._next_id = self._next_id, self._next_id + 1
        tasks = tuple(TaskId(vertex.id, i) for i in range(vertex.parallelism))
        self.under_way = _UnderWay(patch_id, command.uid, payload, ticket, set(tasks), tasks)
        log.info("job %r: staging patch %d of %r at %d subtasks", self.job.name, patch_id, command.uid, len(tasks))
        for task in tasks:
            send(task, StagePatch(patch_id, command.uid, payload))

    def staged(self, message: PatchStaged, send: Send, trigger: Callable[[], int]) -> None:
        """A subtask staged (or refused) the patch under way: switch once every one staged it."""
        patch = self.under_way
        if patch is None or patch.patch_id != message.patch_id or message.task not in patch.awaiting:
            return
        patch.awaiting.discard(message.task)
        if message.error is not None:
            patch.refusals.append(f"{message.task}: {message.error}")
        if patch.awaiting:
            return
        if patch.refusals:
            self.under_way = None
            for task in patch.tasks:
                send(task, DropPatch(patch.patch_id))
            patch.ticket.fail(EpochalError(
                f"patch of {patch.uid!r} refused, the old function runs on: {'; '.join(patch.refusals)}"))
            return
        self._payloads[patch.patch_id] = (patch.uid, patch.payload)
        self.switch_id = patch.patch_id
        patch.checkpoint = trigger()
        log.info("job %r: patch %d of %r switches at checkpoint %d", self.job.name, patch.patch_id, patch.uid,
                 patch.checkpoint)

    # -- checkpoints -----------------------------------------------------------------------------
    def persist(self, storage: CheckpointStorage | None, checkpoint_id: int, switch_id: int
                ) -> tuple[PatchState, ...]:
        """The patches checkpoint `checkpoint_id` records: every one a barrier carried by its
        trigger (`switch_id`), a new one's function written into this checkpoint."""
        if storage is None:
            return ()
        records = {p.uid: p for p in self.active.values() if p.patch_id <= switch_id}
        for patch_id, (uid, payload) in sorted(self._payloads.items()):
            if patch_id > switch_id:
                continue
            written = self._written.get(patch_id)
            if written is None:
                handle = storage.write_file(checkpoint_id, f"patch-{patch_id}", payload)
                written = self._written[patch_id] = PatchState(uid, patch_id, checkpoint_id, handle)
            records[uid] = written
        return tuple(records[uid] for uid in sorted(records))

    def completed(self, manifest: Manifest) -> None:
        """A checkpoint completed: its patches are in effect; a patch it switched to is done."""
        for record in manifest.patches:
            self.active[record.uid] = record
            self._payloads.pop(record.patch_id, None)
        patch = self.under_way
        if patch is not None and patch.checkpoint is not None and patch.checkpoint <= manifest.checkpoint_id:
            self.under_way = None
            patch.ticket.finish(result=manifest.checkpoint_id)

    def aborted(self, checkpoint_id: int) -> None:
        patch = self.under_way
        if patch is not None and patch.checkpoint == checkpoint_id:
            self.under_way = None
            patch.ticket.fail(CheckpointError(
                f"checkpoint {checkpoint_id}, which switched {patch.uid!r} to its patch, was aborted; "
                "the job restores the checkpoint before it, with the old function"))

    def switches_at(self, checkpoint_id: int) -> bool:
        """Whether `checkpoint_id`'s barrier switches a patch in (its abort then fails the attempt)."""
        return self.under_way is not None and self.under_way.checkpoint == checkpoint_id

    def stop(self, why: str) -> None:
        """The attempt ends: a patch under way is given up (its staging dies with the tasks)."""
        patch, self.under_way = self.under_way, None
        if patch is not None:
            patch.ticket.fail(EpochalError(f"patch of {patch.uid!r} abandoned: {why}"))
