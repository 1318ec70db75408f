"""The asynchronous part of a task's checkpoint: serialise fixed state and write it out.

Runs off the processing path (dissertation §4.5, L3513–3534): the task has already fixed its
state copy-on-write and forwarded the barrier, and goes on processing while this runs. Restoring
reads the same files back, taking only the key groups the restoring subtask owns.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any, Sequence

from ..errors import CheckpointError
from ..plan.job_graph import TaskId
from ..state.keygroups import KeyGroupRange
from ..state.snapshot_files import (
    decode_keyed_state,
    decode_operator_state,
    encode_keyed_state,
    encode_operator_state,
)
from ..state.storage import CheckpointStorage, Manifest, SubtaskState
from .messages import OperatorSubtaskState
from .operators import OperatorSnapshot


def _file_stem(uid: str, subtask: int) -> str:
    safe = re.sub(r"[^A-Za-z0-9_.-]", "_", uid)[:60]
    digest = hashlib.sha1(uid.encode()).hexdigest()[:8]
    return f"{safe}-{digest}-{subtask}"


def write_task_snapshot(
    storage: CheckpointStorage | None,
    checkpoint_id: int,
    task: TaskId,
    key_groups: KeyGroupRange,
    snapshots: Sequence[tuple[str, OperatorSnapshot]],
) -> tuple[tuple[OperatorSubtaskState, ...], int]:
    """Write one task's operator snapshots; returns their handles and the bytes written."""
    states = []
    written = 0
    for uid, snap in snapshots:
        keyed_handle = op_handle = None
        if storage is not None:
            stem = _file_stem(uid, task.subtask)
            if snap.keyed is not None and snap.keyed.groups:
                keyed_handle = storage.write_file(checkpoint_id, stem + ".keyed", encode_keyed_state(snap.keyed.groups))
                written += keyed_handle.size
            if snap.state is not None:
                op_handle = storage.write_file(checkpoint_id, stem + ".op", encode_operator_state(snap.state))
                written += op_handle.size
        states.append(
            OperatorSubtaskState(
                uid, SubtaskState(task.subtask, key_groups.start, key_groups.end, keyed_handle, op_handle)
            )
        )
    return tuple(states), written


def read_operator_restore(
    storage: CheckpointStorage, manifest: Manifest, uid: str, key_groups: KeyGroupRange, max_parallelism: int
) -> tuple[dict[int, dict[str, dict[Any, Any]]] | None, list[Any]]:
    """The keyed state of `key_groups` and the operator state of every old subtask of `uid`.

    An operator absent from the checkpoint starts empty (it was added to the job since).
    """
    op = manifest.operator(uid)
    if op is None:
        return None, []
    if op.max_parallelism != max_parallelism:
        raise CheckpointError(
            f"operator {uid!r}: the checkpoint has {op.max_parallelism} key groups but the job "
            f"has max_parallelism={max_parallelism}; keyed state cannot be redistributed"
        )
    keyed: dict[int, dict[str, dict[Any, Any]]] = {}
    states: list[Any] = []
    wanted = range(key_groups.start, key_groups.end)
    for st in op.subtasks:
        if st.keyed is not None and KeyGroupRange(st.key_group_start, st.key_group_end).intersects(key_groups):
            keyed.update(decode_keyed_state(storage.read_file(st.keyed), wanted, source=st.keyed.path))
        # one entry per old subtask, in subtask order: None where it had no operator state
        states.append(
            None
            if st.operator is None
            else decode_operator_state(storage.read_file(st.operator), source=st.operator.path)
        )
    return keyed, states
