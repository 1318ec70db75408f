"""A `SliceTable` in keyed state: one entry per key group, and one key's view for state queries.

Window state must live in key groups (dissertation §4.2: the unit of snapshot, restore, rescaling
and migration), so the table is written as one `GroupSlices` per key group: its keys, the slices
any of them holds, their partials and the watermark each key last fired at. Loading entries of
any set of key groups (a restore, a rescale, groups gained by a live migration) rebuilds rows and
columns; each key keeps its own `fired`, so groups from subtasks at different watermarks fire
exactly as they would have there.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ...state.keygroups import KeyGroupRange, key_group_of
from ...state.manifest import Manifest
from ...state.reader import iter_state
from .store import SliceStore

TABLE_STATE = "__window_table__"  # one GroupSlices per key group, keyed by the key group
STORE_STATE = "__window__"  # a key's windows on the per-key path: its SliceStore

if TYPE_CHECKING:
    from .table import SliceTable


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


def export(table: SliceTable) -> dict[int, GroupSlices]:
    """Every key group's state (key groups holding nothing are left out)."""
    table.compact_rows(force=True)
    n = table.n
    out: dict[int, GroupSlices] = {}
    if not n:
        return out
    order = np.argsort(table.groups[:n], kind="stable")
    groups = table.groups[order]
    bounds = np.flatnonzero(np.r_[True, groups[1:] != groups[:-1]])
    live = slice(table.c0, table.c0 + table.ncols)
    for g, rows in zip(groups[bounds].tolist(), np.split(order, bounds[1:])):
        counts = table.counts[rows, live]
        changed = None if table.changed is None else table.changed[rows, live]
        holding = counts.any(axis=0) if changed is None else counts.any(axis=0) | changed.any(axis=0)
        cols = np.flatnonzero(holding)
        out[g] = GroupSlices(
            tuple(table.keys[i] for i in rows.tolist()), table.fired[rows], table.starts[cols], table.ends[cols],
            counts[:, cols], None if table.values is None else table.values[rows, live][:, cols],
            None if changed is None or not changed.any() else changed[:, cols])
    return out


def load(table: SliceTable, entries: Iterable[tuple[int, GroupSlices]]) -> None:
    """Add key groups' state (restored, or gained by rescaling)."""
    chosen = list(entries)
    if not chosen:
        return
    starts = np.concatenate([e.starts for _, e in chosen])
    ends = np.concatenate([e.ends for _, e in chosen])
    distinct, first = np.unique(starts, return_index=True)
    if any(e.values is not None for _, e in chosen):
        kinds = [e.values.dtype for _, e in chosen if e.values is not None]
        table.ensure_values(np.dtype(np.float64) if any(d.kind == "f" for d in kinds) else kinds[0])
    if any(e.changed is not None for _, e in chosen):
        table.ensure_changed()
    if len(distinct):
        table.columns(distinct, ends[first])
    for group, entry in chosen:
        table.reserve(len(entry.keys))
        slots = np.array([table.new_slot(k, group, f) for k, f in zip(entry.keys, entry.fired.tolist())],
                         dtype=np.int64)
        if not len(entry.starts):
            continue
        block = np.ix_(slots, np.searchsorted(table.starts, entry.starts) + table.c0)
        table.counts[block] = entry.counts
        if entry.values is not None:
            assert table.values is not None
            table.values[block] = np.where(entry.counts > 0, entry.values, table.empty_partial())
        if entry.changed is not None:
            table.ensure_changed()[block] = entry.changed
            table.has_changes = True
    table.due_at = -math.inf
    table.prefix.forget()


def key_store(table: SliceTable, key: Any) -> SliceStore | None:
    """One key's slices as the per-key path's `SliceStore` (a live state query), or None."""
    slot = table.slot_of.get(key)
    if slot is None:
        return None
    live = slice(table.c0, table.c0 + table.ncols)
    return _store(float(table.fired[slot]), table.counts[slot, live],
                  None if table.values is None else table.values[slot, live], table.starts, table.ends)


def group_key_store(group: GroupSlices, key: Any) -> SliceStore | None:
    """One key's slices in a key group's stored state (a read-committed state query), or None."""
    if key not in group.keys:
        return None
    row = group.keys.index(key)
    return _store(float(group.fired[row]), group.counts[row], None if group.values is None else group.values[row],
                  group.starts, group.ends)


def committed_windows(manifest: Manifest, operator: str, key: Any, values: dict[str, Any]) -> dict[str, Any]:
    """A read-committed state query's answer (`values`, the key's entries) with the key's window
    state when the operator keeps it as a slice table per key group: the key's row of its group's
    entry, as the per-key path's `SliceStore` under the same name."""
    values = {name: value for name, value in values.items() if name != TABLE_STATE}  # a group's, not the key's
    op = manifest.operator(operator)
    if op is None:
        return values
    group = key_group_of(key, op.max_parallelism)
    for row in iter_state(manifest, operator, KeyGroupRange(group, group + 1)):
        if row.state == TABLE_STATE and row.key == group and isinstance(row.value, GroupSlices):
            store = group_key_store(row.value, key)
            if store is not None:
                values[STORE_STATE] = store
    return values


def _store(fired: float, counts: np.ndarray, values: np.ndarray | None, starts: np.ndarray,
           ends: np.ndarray) -> SliceStore:
    cols = np.flatnonzero(counts)
    partials = counts[cols] if values is None else values[cols]
    held = starts[cols].tolist()
    return SliceStore(fired=fired, next_fire=math.inf if not held else -math.inf,
                      partials=dict(zip(held, partials.tolist())), starts=held, ends=ends[cols].tolist())
