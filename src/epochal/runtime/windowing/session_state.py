"""A `SessionTable` in keyed state: one entry per key group, and one key's view for state queries.

Window state must live in key groups (dissertation §4.2: the unit of snapshot, restore, rescaling
and migration), so the session table is written as one `GroupSessions` per key group: its keys,
the watermark each last fired at, and its sessions as columns. Loading entries of any set of key
groups (a restore, a rescale, groups gained by a live migration) rebuilds the table
(`SessionTable.load`). A key's sessions read as the per-key path's `SliceStore`, so state
queries answer alike on both paths.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from ...state.keygroups import key_group_of
from .store import SessionSlices, SliceStore

SESSIONS_STATE = "__window_sessions__"  # one GroupSessions per key group, keyed by the key group


@dataclass(frozen=True, slots=True)
class GroupSessions:
    """One key group's sessions, as keyed state holds them (one entry per key group).

    Session `i` belongs to `keys[key_row[i]]` and query `query[i]`, spans `[start[i], end[i])`,
    holds `count[i]` records and the partial `value[i]` (None for a count); `changed[i]`: not
    emitted as it stands. Key `j` last fired at watermark `fired[j]`; `queries`: how many session
    queries the operator has. Never changed after it is written: the next checkpoint writes a new
    one.
    """

    keys: tuple[Any, ...]
    fired: np.ndarray
    key_row: np.ndarray
    query: np.ndarray
    start: np.ndarray
    end: np.ndarray
    count: np.ndarray
    value: np.ndarray | None
    changed: np.ndarray
    queries: int

    def take(self, keys: list[int]) -> GroupSessions:
        """The entry of some of its keys (indices into `keys`, ascending)."""
        picked = np.asarray(keys, dtype=np.int64)
        renumber = np.full(len(self.keys), -1, np.int64)
        renumber[picked] = np.arange(len(picked))
        rows = np.flatnonzero(renumber[self.key_row] >= 0)
        return GroupSessions(tuple(self.keys[i] for i in keys), self.fired[picked], renumber[self.key_row[rows]],
                             self.query[rows], self.start[rows], self.end[rows], self.count[rows],
                             None if self.value is None else self.value[rows], self.changed[rows], self.queries)


def session_store(fired: float, queries: int, query: np.ndarray, start: np.ndarray, end: np.ndarray,
                  partial: np.ndarray, changed: np.ndarray) -> SliceStore:
    """One key's sessions (columns) as the per-key path's `SliceStore`."""
    order = np.lexsort((start, query))
    sessions = [SessionSlices() for _ in range(queries)]
    for q, s, e, p, c in zip(query[order].tolist(), start[order].tolist(), end[order].tolist(),
                             partial[order].tolist(), changed[order].tolist()):
        found = sessions[q]
        found.starts.append(s)
        found.ends.append(e)
        found.partials.append(p)
        found.changed.append(c)
    due = end[changed]
    return SliceStore(fired=fired, next_fire=float(due.min()) if len(due) else math.inf, sessions=sessions)


def group_key_sessions(group: GroupSessions, key: Any) -> SliceStore | None:
    """One key's sessions in a key group's stored state (a read-committed state query), or None."""
    if key not in group.keys:
        return None
    j = group.keys.index(key)
    rows = np.flatnonzero(group.key_row == j)
    return session_store(float(group.fired[j]), group.queries, group.query[rows], group.start[rows], group.end[rows],
                         group.count[rows] if group.value is None else group.value[rows], group.changed[rows])


def split_group_sessions(key: Any, value: Any, old_group: int, max_parallelism: int) -> dict[int, Any]:
    """A key group's session entry cut by the groups its keys fall in among `max_parallelism`
    (what `state.regroup` re-splits it with); any other value whole, in its own key's group."""
    if not isinstance(value, GroupSessions):
        return {key_group_of(key, max_parallelism): value}
    rows: dict[int, list[int]] = {}
    for i, k in enumerate(value.keys):
        rows.setdefault(key_group_of(k, max_parallelism), []).append(i)
    return {group: value.take(picked) for group, picked in rows.items()}
