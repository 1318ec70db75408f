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
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from ...state.keygroups import key_group_of
from .store import SessionSlices, SliceStore

if TYPE_CHECKING:  # a type only: session_columns imports table_partials, which imports table_state
    from .session_columns import SessionRows

SESSIONS_STATE = "__window_sessions__"  # one GroupSessions per key group, keyed by the key group


@dataclass(frozen=True, slots=True)
class GroupSessions:
    """One key group's sessions, as keyed state holds them (one entry per key group).

    `sessions` as the table holds them, but `sessions.slot[i]` is the index in `keys` of session
    `i`'s key; key `j` last fired at watermark `fired[j]`; `queries`: how many session queries
    the operator has. Never changed after it is written: the next checkpoint writes a new one.
    """

    keys: tuple[Any, ...]
    fired: np.ndarray
    sessions: SessionRows
    queries: int

    def take(self, keys: list[int]) -> GroupSessions:
        """The entry of some of its keys (indices into `keys`, ascending)."""
        picked = np.asarray(keys, dtype=np.int64)
        renumber = np.full(len(self.keys), -1, np.int64)
        renumber[picked] = np.arange(len(picked))
        part = self.sessions.take(np.flatnonzero(renumber[self.sessions.slot] >= 0))
        return GroupSessions(tuple(self.keys[i] for i in keys), self.fired[picked],
                             replace(part, slot=renumber[part.slot]), self.queries)


def session_store(fired: float, queries: int, sessions: SessionRows) -> SliceStore:
    """One key's sessions as the per-key path's `SliceStore`."""
    order = np.lexsort((sessions.start, sessions.query))
    partials = sessions.count if sessions.value is None else sessions.value
    out = [SessionSlices() for _ in range(queries)]
    for q, s, e, p, c in zip(sessions.query[order].tolist(), sessions.start[order].tolist(),
                             sessions.end[order].tolist(), partials[order].tolist(), sessions.changed[order].tolist()):
        found = out[q]
        found.starts.append(s)
        found.ends.append(e)
        found.partials.append(p)
        found.changed.append(c)
    due = sessions.end[sessions.changed]
    return SliceStore(fired=fired, next_fire=float(due.min()) if len(due) else math.inf, sessions=out)


def group_key_sessions(group: GroupSessions, key: Any) -> SliceStore | None:
    """One key's sessions in a key group's stored state (a read-committed state query), or None."""
    if key not in group.keys:
        return None
    j = group.keys.index(key)
    return session_store(float(group.fired[j]), group.queries,
                         group.sessions.take(np.flatnonzero(group.sessions.slot == j)))


def split_group_sessions(key: Any, value: Any, old_group: int, max_parallelism: int) -> dict[int, Any]:
    """A key group's session entry cut by the groups its keys fall in among `max_parallelism`
    (what `state.regroup` re-splits it with); any other value whole, in its own key's group."""
    if not isinstance(value, GroupSessions):
        return {key_group_of(key, max_parallelism): value}
    rows: dict[int, list[int]] = {}
    for i, k in enumerate(value.keys):
        rows.setdefault(key_group_of(k, max_parallelism), []).append(i)
    return {group: value.take(picked) for group, picked in rows.items()}
