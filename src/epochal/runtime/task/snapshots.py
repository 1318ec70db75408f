"""The asynchronous part of a task's checkpoint: serialise fixed state and write it out.

Runs off the processing path (dissertation §4.5, asynchronous snapshot invocation): the task has
already fixed its state copy-on-write and forwarded the barrier, and goes on processing while
this runs. The writer only *reads* the snapshots and *returns* what it wrote; the task hands
that back to each keyed-state backend on its own thread (`KeyedStateBackend.on_snapshot_written`),
which is also when the backend releases the snapshot. Restoring reads the same files back,
taking only the key groups the restoring subtask owns.
"""

from __future__ import annotations

import hashlib
import itertools
import logging
import re
from collections.abc import Callable, Container, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from ...errors import CheckpointError
from ...plan.job_graph import TaskId
from ...state.contract import KeyedSnapshot
from ...state.keygroups import KeyGroupRange, KeyGroups
from ...state.manifest import FileHandle, Manifest, SubtaskState
from ...state.savepoints import storage_for
from ...state.sections import GroupCopies, KeyedGroups, SectionCopy, Sections, apply_sections
from ...state.snapshot_files import (
    KeyedFile,
    decode_keyed_file,
    decode_operator_state,
    encode_operator_state,
    encode_sections,
    iter_keyed_file,
)
from ...state.storage import CheckpointStorage
from ..fault_points import fault_point
from ..operators import OperatorSnapshot
from ..wire.messages import OperatorSubtaskState

log = logging.getLogger(__name__)


class SnapshotTarget(Protocol):
    """Where a task's snapshot files go: the job's storage, or the process's merged file
    (`file_merging.SegmentSink`)."""

    def write_file(self, checkpoint_id: int, name: str, data: bytes | Iterable[bytes]) -> FileHandle: ...


def _file_stem(uid: str, subtask: int) -> str:
    safe = re.sub(r"[^A-Za-z0-9_.-]", "_", uid)[:60]
    digest = hashlib.sha1(uid.encode()).hexdigest()[:8]
    return f"{safe}-{digest}-{subtask}"


def _sections(keyed: KeyedSnapshot) -> Sections:
    if keyed.encoded is not None:
        return keyed.encoded
    return keyed.delta_sections() if keyed.is_delta else keyed.full_sections()


def _keyed_chunks(keyed: KeyedSnapshot) -> Iterator[bytes] | None:
    """The chunks of a keyed snapshot's file (full or delta), or None if it holds nothing."""
    sections = iter(_sections(keyed))
    first = next(sections, None)
    if first is None:
        return None
    return iter_keyed_file(itertools.chain([first], sections), delta=keyed.is_delta)


def serialise_small_snapshots(snapshots: Sequence[tuple[str, OperatorSnapshot]], max_entries: int) -> None:
    """Pickle the entries of keyed snapshots that write at most `max_entries` of them now, and
    release them: the writer then writes bytes only (`snapshot_files.encode_sections`).

    Called on the task's thread, in the synchronous part (`StateConfig.inline_snapshot_entries`).
    For a small state, or a small delta of a large one, copy-on-write costs the records after
    the barrier more than pickling does: each key group's map is copied on its first write while
    the writer runs, cold in the cache (measured at 1 GB: a batch copied 60 maps of 8,000
    entries, 2 ms each, while the writer wrote a migration's copied sections). Copied sections
    stay bytes, written and checksummed by the writer. Only snapshots that know their size
    qualify (the heap backend's; a disk snapshot is read from the database by the writer). A
    snapshot that cannot be pickled is left whole, for the writer to report.
    """
    for _, snap in snapshots:
        keyed = snap.keyed
        if keyed is None or keyed.encoded is not None:
            continue
        entries = keyed.entries
        if entries is not None and entries <= max_entries:
            try:
                keyed.encoded = encode_sections(_sections(keyed), delta=keyed.is_delta)
            except Exception:
                continue
            keyed.release()


def _write_keyed(
    storage: SnapshotTarget, checkpoint_id: int, stem: str, keyed: KeyedSnapshot
) -> tuple[FileHandle | None, tuple[FileHandle, ...]]:
    """Write a full file or a delta; returns (the new file or None, the chain's earlier files)."""
    chunks = _keyed_chunks(keyed)
    base = keyed.base if keyed.is_delta else ()
    handle = None
    if chunks is not None:
        handle = storage.write_file(checkpoint_id, stem + ".keyed", chunks)
    return handle, base


def write_task_snapshot(
    storage: SnapshotTarget | None,
    checkpoint_id: int,
    task: TaskId,
    key_groups: KeyGroups,
    snapshots: Sequence[tuple[str, OperatorSnapshot]],
) -> tuple[tuple[OperatorSubtaskState, ...], int]:
    """Write one task's operator snapshots; returns where each operator's state went and the
    bytes written.

    Keyed state goes out in full or as a delta over the subtask's last complete checkpoint
    (the snapshot decides); a delta's manifest entry lists the chain's earlier files as
    `keyed_base`, so an operator's `SubtaskState.keyed_chain()` is the chain its keyed state
    was written as: what the task passes to `on_snapshot_written` (None instead when `storage`
    is None: nothing was written). Runs on a background thread: it only reads the snapshots.
    Bytes written count only the new files.
    """
    states = []
    written = 0
    for uid, snap in snapshots:
        keyed_handle = op_handle = None
        keyed_base: tuple[FileHandle, ...] = ()
        if storage is not None:
            stem = _file_stem(uid, task.subtask)
            if snap.keyed is not None:
                keyed_handle, keyed_base = _write_keyed(storage, checkpoint_id, stem, snap.keyed)
                if keyed_handle is not None:
                    written += keyed_handle.size
            if snap.state is not None:
                op_handle = storage.write_file(checkpoint_id, stem + ".op", encode_operator_state(snap.state))
                written += op_handle.size
            fault_point("checkpoint.write")  # tests: die mid-write, this operator's files written
        states.append(
            OperatorSubtaskState(
                uid,
                subtask_state(task.subtask, key_groups, keyed_handle, op_handle, keyed_base),
            )
        )
    return tuple(states), written


def subtask_state(
    subtask: int, key_groups: KeyGroups, keyed: FileHandle | None, operator: FileHandle | None,
    keyed_base: tuple[FileHandle, ...],
) -> SubtaskState:
    """Where a subtask's state went, naming its key groups (a range, or a set after a migration)."""
    if isinstance(key_groups, KeyGroupRange):
        return SubtaskState(subtask, key_groups.start, key_groups.end, keyed, operator, keyed_base)
    groups = tuple(key_groups)
    return SubtaskState(subtask, min(groups, default=0), max(groups, default=-1) + 1, keyed, operator, keyed_base,
                        groups)


def read_keyed_chain(
    storage: CheckpointStorage, chain: Sequence[FileHandle], wanted: Container[int] | None = None
) -> KeyedGroups:
    """The keyed state a chain of files (full, then deltas) holds, for the key groups `wanted`."""
    out: KeyedGroups = {}
    for handle in chain:
        is_delta, groups = decode_keyed_file(storage.read_file(handle), wanted, source=handle.label)
        apply_sections(out, is_delta, groups)
    return out


def read_operator_restore(
    storage: CheckpointStorage | None, manifest: Manifest, uid: str, key_groups: KeyGroups, max_parallelism: int,
    operator_state: bool = True,
) -> tuple[KeyedGroups | None, list[Any]]:
    """The keyed state of `key_groups` and the operator state of every old subtask of `uid`
    (none when `operator_state` is False: a migration adopts key groups only).

    An operator absent from the checkpoint starts empty (it was added to the job since). Files
    are read from where the manifest was loaded: the job's checkpoint directory, or a savepoint.
    """
    op = manifest.operator(uid)
    if op is None:
        return None, []
    if op.max_parallelism != max_parallelism:
        raise CheckpointError(
            f"operator {uid!r}: the checkpoint has {op.max_parallelism} key groups but the job "
            f"has max_parallelism={max_parallelism}; re-split the state into {max_parallelism} key groups with "
            f"`epochal savepoint rescale-groups SRC DST --max-parallelism {max_parallelism}` and start from DST"
        )
    reader = storage_for(manifest, storage)
    keyed: KeyedGroups = {}
    states: list[Any] = []
    for st in op.subtasks:
        chain = st.keyed_chain()
        held = st.holds()
        wanted = {g for g in key_groups if g in held}  # only what the chain's owner held
        if chain and wanted:
            keyed.update(read_keyed_chain(reader, chain, wanted))
        if not operator_state:
            continue
        # one entry per old subtask, in subtask order: None where it had no operator state
        states.append(
            None
            if st.operator is None
            else decode_operator_state(reader.read_file(st.operator), source=st.operator.label)
        )
        fault_point("restore.read")  # tests: die mid-restore, this old subtask's files read
    return keyed, states


@dataclass(slots=True)
class PreparedGroups:
    """Key groups read ahead of a migration (pre-copy) from an earlier complete checkpoint: per
    operator uid and old subtask, the groups read and the chain they were read from; per uid,
    their state and the sections it was read from (`GroupCopies`, in chain order)."""

    checkpoint_id: int
    read: dict[tuple[str, int], tuple[frozenset[int], tuple[str, ...]]]
    state: dict[str, KeyedGroups]
    copies: dict[str, dict[int, list[SectionCopy]]]


Pace = Callable[[Callable[[], None]], None]


def _unpaced(work: Callable[[], None]) -> None:
    work()


def _read_into(reader: CheckpointStorage, handles: Iterable[FileHandle], wanted: Container[int],
               state: KeyedGroups, copies: dict[int, list[SectionCopy]], pace: Pace = _unpaced) -> None:
    """Apply the sections of `wanted` in the files `handles` to `state`, keeping their bytes;
    `pace` runs the decoding of each section."""
    for handle in handles:
        file = KeyedFile(reader.open_ranged(handle), source=handle.label)  # only the sections wanted
        try:
            for group in file.groups(wanted):
                raw = file.raw(group)
                copies.setdefault(group, []).append(SectionCopy(file.is_delta, raw))
                pace(lambda: apply_sections(state, file.is_delta, {group: file.decode(group, raw)}))  # noqa: B023
        finally:
            file.release()


def prepare_groups(storage: CheckpointStorage | None, manifest: Manifest, uids: Iterable[str],
                   key_groups: KeyGroups, pace: Pace = _unpaced) -> PreparedGroups:
    """Read `key_groups` of the operators `uids` from `manifest` (off the processing path: the
    state a new owner will take, before the barrier that moves it); `pace` runs the decoding of
    each section, to leave the task's thread the GIL."""
    reader = storage_for(manifest, storage)
    prepared = PreparedGroups(manifest.checkpoint_id, {}, {}, {})
    for uid in uids:
        op = manifest.operator(uid)
        if op is None:
            continue
        state = prepared.state.setdefault(uid, {})
        copies = prepared.copies.setdefault(uid, {})
        for st in op.subtasks:
            held = st.holds()
            wanted = frozenset(g for g in key_groups if g in held)
            chain = st.keyed_chain()
            if chain and wanted:
                _read_into(reader, chain, wanted, state, copies, pace)
                prepared.read[(uid, st.subtask)] = (wanted, tuple(h.label for h in chain))
    return prepared


def read_groups(storage: CheckpointStorage | None, manifest: Manifest, uid: str, key_groups: KeyGroups,
                prepared: PreparedGroups | None) -> tuple[KeyedGroups, GroupCopies]:
    """The state of `key_groups` of operator `uid` in `manifest`, and the sections it was read
    from: only the files newer than what `prepared` read where its chain goes on from there
    (else the whole chain)."""
    op = manifest.operator(uid)
    if op is None:
        return {}, {}
    reader = storage_for(manifest, storage)
    out: KeyedGroups = {}
    copies: dict[int, list[SectionCopy]] = {}
    for st in op.subtasks:
        held = st.holds()
        wanted = {g for g in key_groups if g in held}
        chain = st.keyed_chain()
        if not chain or not wanted:
            continue
        paths = tuple(h.label for h in chain)
        before = prepared.read.get((uid, st.subtask)) if prepared is not None else None
        part: KeyedGroups = {}
        if prepared is not None and before is not None and wanted <= before[0] \
                and paths[:len(before[1])] == before[1]:
            state, read = prepared.state.get(uid, {}), prepared.copies.get(uid, {})
            part = {g: state[g] for g in wanted if g in state}
            copies.update((g, list(read[g])) for g in wanted if g in read)
            newer = chain[len(before[1]):]  # only what was written since
        else:
            if prepared is not None:
                log.warning("%s: subtask %d held other key groups or began a new chain since the read-ahead "
                            "(checkpoint %d); reading its chain whole while the input waits", uid, st.subtask,
                            prepared.checkpoint_id)
            newer = chain
        _read_into(reader, newer, wanted, part, copies)
        out.update(part)
    return out, {g: tuple(sections) for g, sections in copies.items()}
