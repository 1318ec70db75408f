"""Changing a job's max parallelism: a savepoint's keyed state re-split into other key groups.

The number of key groups (`StateConfig(max_parallelism=...)`) is fixed for the life of a job's
state (dissertation §4.2: a key's group is its hash modulo that number, and every snapshot,
rescale and migration moves whole groups), and it is the ceiling of the job's parallelism. To
run a job wider than its key groups allow, or to give it finer groups to migrate, the state is
re-split offline: every entry goes to its key's group under the new count, and a new
self-contained savepoint holds the result, which a job with the new `max_parallelism` starts
from (`epochal savepoint rescale-groups SRC DST --max-parallelism N`). Operator state (source
positions, sinks' staged output) is copied as it is: it is not cut by key group.

An entry is re-split by its key, so a state whose entries are kept per key group instead (a
columnar window table keeps one entry per group) needs a *splitter* that cuts such an entry by
the keys it holds; the caller passes those by state name (`epochal.cli` passes the window
table's). An entry of any other state whose key does not hash to the group it was stored in is
an error, not a guess. An unaligned checkpoint's in-flight data cannot be re-split (take an
aligned savepoint: a savepoint always is).

The whole keyed state of one operator is held in memory while it is re-split (one operator at
a time); the output is one merged file (`merged_files`) and the manifest.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

import pyarrow.fs as pafs

from ..errors import CheckpointError
from .keygroups import MAX_KEY_GROUPS, key_group_of, key_group_range
from .manifest import FileHandle, Manifest, OperatorState, SplitLogState, SubtaskState
from .merged_files import MergedFileWriter
from .savepoints import load_savepoint, storage_for
from .sections import KeyedGroups, apply_sections
from .snapshot_files import decode_keyed_file, iter_keyed_file
from .storage import MANIFEST_NAME, CheckpointStorage

__all__ = ["Splitter", "regroup_savepoint"]

# (an entry stored under `key` in `old_group`, the new number of key groups) → its parts by new group
Splitter = Callable[[Any, Any, int, int], dict[int, Any]]

_FILE = "files/state.merged"
_IN_FLIGHT = "#in-flight"  # the uid suffix of a vertex's in-flight logs (`runtime.channel_state`)


def _source(path: str, which: str | int) -> Manifest:
    savepoint = load_savepoint(path)
    if savepoint is not None:
        return savepoint
    return CheckpointStorage(path, create=False).resolve(which)


def _keyed(storage: CheckpointStorage, op: OperatorState) -> KeyedGroups:
    groups: KeyedGroups = {}
    for st in op.subtasks:
        held = st.holds()
        part: KeyedGroups = {}
        for handle in st.keyed_chain():
            is_delta, sections = decode_keyed_file(storage.read_file(handle), held, source=handle.label)
            apply_sections(part, is_delta, sections)
        groups.update(part)
    return groups


def _resplit(uid: str, groups: KeyedGroups, old: int, new: int, splitters: Mapping[str, Splitter]) -> KeyedGroups:
    out: KeyedGroups = {}
    for group, states in groups.items():
        for name, entries in states.items():
            splitter = splitters.get(name)
            for key, value in entries.items():
                if splitter is not None:
                    for target, part in splitter(key, value, group, new).items():
                        out.setdefault(target, {}).setdefault(name, {})[target if key == group else key] = part
                    continue
                if key_group_of(key, old) != group:
                    raise CheckpointError(
                        f"operator {uid!r}, state {name!r}: key {key!r} is stored in key group {group}, not in "
                        f"its own ({key_group_of(key, old)}); its entries are not per key, and no splitter "
                        "re-splits them")
                out.setdefault(key_group_of(key, new), {}).setdefault(name, {})[key] = value
    return out


def regroup_savepoint(
    source: str, target: str, max_parallelism: int, *, checkpoint: str | int = "latest",
    splitters: Mapping[str, Splitter] | None = None,
) -> Manifest:
    """Write a savepoint at `target` holding `source`'s state in `max_parallelism` key groups.

    `source` is a savepoint directory, or a checkpoint directory (its `checkpoint`, the latest
    by default). Returns the new savepoint's manifest.
    """
    if not 1 <= max_parallelism <= MAX_KEY_GROUPS:
        raise ValueError(f"max_parallelism must be from 1 to {MAX_KEY_GROUPS}, got {max_parallelism}")
    manifest = _source(source, checkpoint)
    reader = storage_for(manifest, None)
    dest = CheckpointStorage(target)
    if dest.fs.get_file_info(pafs.FileSelector(dest.root, allow_not_found=True)):
        raise CheckpointError(f"savepoint directory {target!r} is not empty")
    writer = MergedFileWriter(dest, _FILE)
    copied: dict[str, FileHandle] = {}  # an operator-state file or a split log, by label: copied once

    def copy(handle: FileHandle | None) -> FileHandle | None:
        if handle is None:
            return None
        if handle.label not in copied:
            copied[handle.label] = writer.append(reader.read_file(handle))
        return copied[handle.label]

    try:
        operators = []
        for op in manifest.operators:
            if op.uid.endswith(_IN_FLIGHT) and any(st.operator is not None for st in op.subtasks):
                raise CheckpointError(
                    f"checkpoint {manifest.checkpoint_id} holds in-flight data (an unaligned checkpoint): its "
                    "key groups cannot be re-split; take a savepoint of the job (always aligned) and re-split that")
            keyed = _resplit(op.uid, _keyed(reader, op), op.max_parallelism, max_parallelism, splitters or {})
            width = min(len(op.subtasks) or 1, max_parallelism)
            subtasks = []
            for i in range(max(width, len(op.subtasks))):
                groups = key_group_range(i, width, max_parallelism) if i < width else None
                sections = [] if groups is None else [(g, keyed[g]) for g in groups if g in keyed]
                handle = writer.append(iter_keyed_file(sections)) if sections else None
                old = op.subtasks[i] if i < len(op.subtasks) else None
                start, end = (groups.start, groups.end) if groups is not None else (0, 0)
                subtasks.append(SubtaskState(i, start, end, handle, copy(old.operator if old else None)))
            operators.append(OperatorState(op.uid, op.parallelism, max_parallelism, tuple(subtasks)))
        split_logs = tuple(
            SplitLogState(log.uid, log.length, tuple(h for h in map(copy, log.segments) if h is not None))
            for log in manifest.split_logs
        )
        whole = writer.close() if writer.is_open else None
    except BaseException:
        writer.abort()
        raise
    regrouped = replace(
        manifest, operators=tuple(operators), split_logs=split_logs, routing=None, is_savepoint=True,
        merged=(whole,) if whole is not None else (), location=dest.uri,
    )
    dest.write(MANIFEST_NAME, regrouped.to_json())
    return regrouped
