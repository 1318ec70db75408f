"""Columnar session windows: every key's sessions in one table, merged and fired per batch.

The per-key path keeps each key's sessions in its `SliceStore` (`sessions.Sessions`) and fires
each key on its own timer: per batch a store fetched, changed and copied on write per key, per
checkpoint every store pickled (Nexmark q11 spent most of its time there). For session queries
(`Session`, any number of gaps) with a count, sum, min or max, the same merging slices
(dissertation §5.2.2) fit one table of sessions (`session_columns.SessionRows`: a row per
session). A batch is cut into runs per key and merged into the sessions of the keys it touches
in a few vectorized steps (`add`); a watermark emits every changed session that has ended, for
every key at once, and frees the sessions no acceptable record can touch any more (`fire`).

Lateness and re-firing follow `engine.Windowing` exactly: a row is late for a query when its
own window closed `allowed_lateness` or more before the watermark (`ts + gap + lateness <=
watermark`); a row behind the watermark but not late joins its sessions and fires them again; a
session is freed once `end + gap + lateness <= watermark`; each key keeps the watermark it last
fired at (`KeySlots.fired`), which says whether a firing is on time or a late update.

The table is working state. Keyed state holds it per key group (dissertation §4.2;
`session_state.GroupSessions`, `export`/`load`), so it is checkpointed, restored, rescaled and
migrated with its key groups.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import replace
from typing import Any

import numpy as np

from .columnar import key_codes
from .session_columns import SessionRows, lanes, runs, union
from .session_lists import SessionLists
from .session_state import GroupSessions, session_store
from .sessions import Sessions
from .store import SliceStore
from .table import TableAdmission
from .table_firing import FiredColumns
from .table_partials import Reduction, value_dtype
from .table_slots import KeySlots

_MIN_SLOTS = 1024  # slots of keys without sessions are given up once more than this many and half


class SessionTable:
    """Every key's sessions of one operator's session queries, as columns (`SessionLists`)."""

    def __init__(self, sessions: Sessions, reduction: Reduction) -> None:
        self.sessions = sessions
        self.names = sessions.names
        self.gaps = np.asarray(sessions.gaps, dtype=np.float64)
        self.lateness = sessions.lateness
        self.reduction = reduction
        self.slots = KeySlots()
        self.lists = SessionLists(len(self.names), None)
        self.due_at = math.inf  # no changed session ends before this
        self.free_at = math.inf  # no session can be freed before this watermark
        self.has_changes = False  # rows behind the watermark changed sessions: they fire again

    # -- keys -----------------------------------------------------------------------------------

    def slots_of(self, keys: list[Any], group_of: Callable[[Any], int], fired: float) -> np.ndarray:
        """The slot of each key; a new key gets one (its key group from `group_of`)."""
        slots = self.slots
        out = slots.find(keys)
        missing = out.count(-1)
        if missing:
            if slots.n + missing > slots.capacity:
                slots.grow(max(16, 2 * (slots.n + missing)))
                self.lists.slots(slots.capacity)
            for i, k in enumerate(keys):
                if out[i] == -1:
                    out[i] = slots.add(k, group_of(k), fired)
        return np.array(out, dtype=np.int64)

    def _compact_slots(self, force: bool = False) -> None:
        """Give up the slots of keys that hold no session (when that frees half of them)."""
        n = self.slots.n
        if not n or (not force and n <= _MIN_SLOTS):
            return
        held = np.zeros(n, np.bool_)
        held[self.lists.columns.slot[self.lists.rows()]] = True
        kept = np.flatnonzero(held)
        if len(kept) == n or (not force and len(kept) > n // 2):
            return
        moved = np.full(n, -1, np.int64)
        moved[kept] = np.arange(len(kept))
        self.slots.keep(kept)
        self.lists.move_slots(moved, kept)

    # -- adding ---------------------------------------------------------------------------------

    def add(self, keys: Any, ts: np.ndarray, values: np.ndarray | None, watermark: float,
            group_of: Callable[[Any], int], weights: np.ndarray | None = None) -> TableAdmission:
        """Add a batch: `keys` (Arrow, numpy or a list), `ts` (float64 seconds), `values`
        (numeric numpy, None for a count) at the operator's `watermark`."""
        if weights is not None:
            raise ValueError("a session table takes records, not partials of a local phase")
        codes, distinct = key_codes(keys)
        if len(codes) != len(ts) or (values is not None and len(values) != len(ts)):
            raise ValueError(f"keys, timestamps and values differ in length: {len(codes)}, {len(ts)}, "
                             f"{'-' if values is None else len(values)}")
        if values is not None:
            values = self._values(values)
        slot = self.slots_of(distinct, group_of, watermark)[codes]
        pieces: list[SessionRows] = []
        late = np.zeros(len(ts), np.bool_)
        late_for: list[np.ndarray] = []
        behind = ts < watermark
        any_behind = bool(behind.any())
        if any_behind:  # as the per-key path: a key with a row behind the watermark counts as fired at it
            fired, at = self.slots.fired, slot[behind]
            fired[at] = np.maximum(fired[at], watermark)
        counted_behind = False  # a row behind the watermark joined sessions: they fire again
        for q, gap in enumerate(self.gaps.tolist()):
            if any_behind:
                too_late = (ts + gap) + self.lateness <= watermark
                late_for.append(too_late)
                if too_late.any():
                    late |= too_late
                    kept = np.flatnonzero(~too_late)
                    counted_behind |= bool(len(kept)) and bool(behind[kept].any())
                    pieces.append(runs(slot[kept], ts[kept], None if values is None else values[kept], q, gap,
                                       self.reduction))
                    continue
                counted_behind = True
            pieces.append(runs(slot, ts, values, q, gap, self.reduction))
        self.has_changes |= counted_behind
        self._merge(SessionRows.concat(pieces))
        late_rows = np.flatnonzero(late)
        names = self.names
        late_queries = [tuple(names[q] for q in range(len(names)) if late_for[q][row])
                        for row in late_rows.tolist()]
        return TableAdmission(late_rows, late_queries, counted_behind)

    def _values(self, values: np.ndarray) -> np.ndarray:
        dtype = value_dtype(values)
        if dtype is None:
            raise TypeError(f"{self.reduction.value} on the columnar path needs numbers, got {values.dtype}")
        held = self.lists.value_dtype
        if held is None or (dtype.kind == "f" and held.kind != "f"):
            self.lists.with_values(dtype)
            held = dtype
        return np.asarray(values, dtype=held)

    def _merge(self, new: SessionRows) -> None:
        """Merge new runs into the sessions of the (query, key) lanes they fall in."""
        if not len(new):
            return
        width = self.slots.capacity
        touched = np.unique(lanes(new, width))
        old = self.lists.lane_rows(touched // width, touched % width)
        merged = union(SessionRows.concat([self.lists.take(old), new]), width, self.reduction)
        self.lists.replace(old, merged)
        ends = merged.end[merged.changed]
        if len(ends):
            self.due_at = min(self.due_at, float(ends.min()))
        self.free_at = min(self.free_at, float((new.end + self.gaps[new.query]).min()) + self.lateness)

    # -- firing ---------------------------------------------------------------------------------

    def fire(self, watermark: float) -> FiredColumns | None:
        """Every changed session that has ended by `watermark`, ordered by (end, start, query,
        key slot); then the sessions no acceptable record can touch are freed."""
        if watermark < self.due_at and watermark < self.free_at and not self.has_changes:
            return None
        lists, slots = self.lists, self.slots
        c, live = lists.columns, lists.live
        fired = slots.fired[:slots.n]
        out = None
        due = np.flatnonzero(live & c.changed & (c.end <= watermark))
        if len(due):
            due = due[np.lexsort((c.slot[due], c.query[due], c.start[due], c.end[due]))]
            slot, end = c.slot[due], c.end[due]
            result = c.count[due] if c.value is None else c.value[due]
            out = FiredColumns(slots.key_array(slot), c.query[due], c.start[due], end, result, end <= fired[slot])
            c.changed[due] = False
        np.maximum(fired, watermark, out=fired)
        self.has_changes = False
        reach = c.end + self.gaps[c.query]
        freed = np.flatnonzero(live & (reach + self.lateness <= watermark))
        if len(freed):
            lists.drop(freed)
            self._compact_slots()
        c, live = lists.columns, lists.live
        changed = c.end[live & c.changed]
        self.due_at = float(changed.min()) if len(changed) else math.inf
        self.free_at = float(reach[live].min()) + self.lateness if len(lists) else math.inf
        return out

    # -- keyed state ----------------------------------------------------------------------------

    def export(self) -> dict[int, GroupSessions]:
        """Every key group's sessions (key groups holding none are left out)."""
        self._compact_slots(force=True)
        slots = self.slots
        rows = self.lists.take(self.lists.rows())
        out: dict[int, GroupSessions] = {}
        if not len(rows):
            return out
        group = slots.groups[rows.slot]
        order = np.lexsort((rows.start, rows.query, rows.slot, group))
        group = group[order]
        bounds = np.flatnonzero(np.r_[True, group[1:] != group[:-1]])
        keys = slots.keys
        for g, picked in zip(group[bounds].tolist(), np.split(order, bounds[1:])):
            part = rows.take(picked)
            held, key_row = np.unique(part.slot, return_inverse=True)
            out[g] = GroupSessions(tuple(keys[s] for s in held.tolist()), slots.fired[held],
                                   replace(part, slot=key_row.astype(np.int64)), len(self.names))
        return out

    def load(self, entries: Iterable[tuple[int, GroupSessions]]) -> None:
        """Add key groups' sessions (restored, or gained by rescaling or a migration) to a table
        that holds none of their keys."""
        parts: list[SessionRows] = []
        for group, entry in entries:
            slot = self.slots_of(list(entry.keys), _in_group(group), -math.inf)
            self.slots.fired[slot] = entry.fired
            stored = entry.sessions
            value = None if stored.value is None else self._values(stored.value)
            parts.append(replace(stored, slot=slot[stored.slot], value=value))
            self.has_changes |= bool(stored.changed.any())
        if not parts:
            return
        held = self.lists.value_dtype  # integers of earlier entries turn to floats if a later one had floats
        rows = SessionRows.concat([p if held is None else p.with_values(held) for p in parts])
        self.lists.replace(np.empty(0, np.int64), rows.take(np.lexsort((rows.start, rows.slot, rows.query))))
        self.due_at = self.free_at = -math.inf  # anything may be due: the next firing looks

    def clear(self) -> None:
        """Forget everything (before loading the key groups a subtask owns now)."""
        self.__init__(self.sessions, self.reduction)  # type: ignore[misc]

    def key_store(self, key: Any) -> SliceStore | None:
        """One key's sessions as the per-key path's `SliceStore` (a live state query), or None."""
        slot = self.slots.slot_of.get(key)
        if slot is None:
            return None
        picked = self.lists.lane_rows(np.arange(len(self.names)), np.full(len(self.names), slot))
        if not len(picked):
            return None
        return session_store(float(self.slots.fired[slot]), len(self.names), self.lists.take(picked))


def _in_group(group: int) -> Callable[[Any], int]:
    """`group_of` for the keys of one key group's entry."""
    return lambda _: group
