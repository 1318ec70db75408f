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

from .store import SliceStore

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
    table.prefix_to = -1


def key_store(table: SliceTable, key: Any) -> SliceStore | None:
    """One key's slices as the per-key path's `SliceStore` (a live state query), or None."""
    slot = table.slot_of.get(key)
    if slot is None:
        return None
    live = slice(table.c0, table.c0 + table.ncols)
    counts = table.counts[slot, live]
    cols = np.flatnonzero(counts)
    partials = counts[cols] if table.values is None else table.values[slot, live][cols]
    starts = table.starts[cols].tolist()
    return SliceStore(fired=float(table.fired[slot]), next_fire=math.inf if not starts else -math.inf,
                      partials=dict(zip(starts, partials.tolist())), starts=starts,
                      ends=table.ends[cols].tolist())
