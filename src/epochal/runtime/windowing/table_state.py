"""A `SliceTable` in keyed state: one entry per key group, and one key's view for state queries.

Window state must live in key groups (dissertation §4.2: the unit of snapshot, restore, rescaling
and migration), so the table is written as one `GroupSlices` per key group: its keys, the slices
any of them holds, their partials and the watermark each key last fired at. Loading entries of
any set of key groups (a restore, a rescale, groups gained by a live migration) rebuilds rows and
columns (`SliceTable.load`); each key keeps its own `fired`, so groups from subtasks at different
watermarks fire exactly as they would have there. A key's row reads as the per-key path's
`SliceStore`, so state queries answer alike on both paths.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from ...state.keygroups import KeyGroupRange, key_group_of
from ...state.manifest import Manifest
from ...state.reader import iter_state
from .session_state import SESSIONS_STATE, GroupSessions, group_key_sessions, split_group_sessions
from .store import SliceStore

TABLE_STATE = "__window_table__"  # one GroupSlices per key group, keyed by the key group
STORE_STATE = "__window__"  # a key's windows on the per-key path: its SliceStore


@dataclass(frozen=True, slots=True)
class GroupSlices:
    """One key group's window state, as keyed state holds it (one entry per key group).

    Row `i` is `keys[i]`, last fired at watermark `fired[i]`; column `j` is the slice
    `[starts[j], ends[j])`. `values` holds sum/min/max partials (None for a count), meaningful
    where `counts` is not 0; `changed` marks cells late records updated since the last firing.
    Never changed after it is written: the next checkpoint writes a new one.
    """

    keys: tuple[Any, ...]
    fired: np.ndarray
    starts: np.ndarray
    ends: np.ndarray
    counts: np.ndarray
    values: np.ndarray | None
    changed: np.ndarray | None


def group_key_store(group: GroupSlices, key: Any) -> SliceStore | None:
    """One key's slices in a key group's stored state (a read-committed state query), or None."""
    if key not in group.keys:
        return None
    row = group.keys.index(key)
    return slice_store(float(group.fired[row]), group.counts[row], None if group.values is None else group.values[row],
                  group.starts, group.ends)


def committed_windows(manifest: Manifest, operator: str, key: Any, values: dict[str, Any]) -> dict[str, Any]:
    """A read-committed state query's answer (`values`, the key's entries) with the key's window
    state when the operator keeps it as a slice or session table per key group: the key's part of
    its group's entry, as the per-key path's `SliceStore` under the same name."""
    values = {name: value for name, value in values.items()
              if name not in (TABLE_STATE, SESSIONS_STATE)}  # a group's, not the key's
    op = manifest.operator(operator)
    if op is None:
        return values
    group = key_group_of(key, op.max_parallelism)
    for row in iter_state(manifest, operator, KeyGroupRange(group, group + 1)):
        store = None
        if row.state == TABLE_STATE and row.key == group and isinstance(row.value, GroupSlices):
            store = group_key_store(row.value, key)
        elif row.state == SESSIONS_STATE and row.key == group and isinstance(row.value, GroupSessions):
            store = group_key_sessions(row.value, key)
        if store is not None:
            values[STORE_STATE] = store
    return values


def slice_store(fired: float, counts: np.ndarray, values: np.ndarray | None, starts: np.ndarray,
                ends: np.ndarray) -> SliceStore:
    """One key's row (its counts and value partials over the slices `starts`, `ends`) as the
    per-key path's `SliceStore`."""
    cols = np.flatnonzero(counts)
    partials = counts[cols] if values is None else values[cols]
    held = starts[cols].tolist()
    return SliceStore(fired=fired, next_fire=math.inf if not held else -math.inf,
                      partials=dict(zip(held, partials.tolist())), starts=held, ends=ends[cols].tolist())


def split_group_slices(key: Any, value: Any, old_group: int, max_parallelism: int) -> dict[int, Any]:
    """A key group's slice-table entry (`TABLE_STATE`, stored under the group) cut by the groups
    its keys fall in among `max_parallelism`: what `state.regroup` re-splits it with. Any other
    value of that state is returned whole, in its own key's group."""
    if not isinstance(value, GroupSlices):
        return {key_group_of(key, max_parallelism): value}
    rows: dict[int, list[int]] = {}
    for i, k in enumerate(value.keys):
        rows.setdefault(key_group_of(k, max_parallelism), []).append(i)
    out: dict[int, Any] = {}
    for group, picked in rows.items():
        index = np.asarray(picked, dtype=np.int64)
        out[group] = GroupSlices(
            tuple(value.keys[i] for i in picked), value.fired[index], value.starts, value.ends, value.counts[index],
            None if value.values is None else value.values[index],
            None if value.changed is None else value.changed[index])
    return out


# the states kept per key group, for `state.regroup`
SPLITTERS = {TABLE_STATE: split_group_slices, SESSIONS_STATE: split_group_sessions}
