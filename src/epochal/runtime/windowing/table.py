"""Columnar window state for periodic queries: one slice table, every key's windows fired at once.

The per-key `SliceStore` path costs a Python call per (key, slice) group of a batch and fires
each key on its own timer. For periodic queries (`Tumbling`, `Sliding`, any number of them) with
an associative aggregate (count, sum, min, max) the same shared slices (dissertation §5.3.1,
§5.4.3) fit a table: one row per key, one column per slice holding a record of any key. A batch
adds its rows with one grouping pass (`add`); a watermark fires every due window of every key in
one pass (`fire`), Cutty's `lookup(start, end)` (§5.5.2, Algorithm 8) done for all keys at
once. A window produces a result for a key only if the key had records in it, as on the per-key
path.

A `SliceTable` joins its parts: which key a row holds (`table_slots.KeySlots`), the partials
(`table_partials.SlicePartials`), and when windows are due and firing them
(`table_firing.TableFiring`). Itself it admits a batch's rows: a row behind the watermark is
checked per query (rare, per row), counted where a window holding it is still open (and its cell
marked changed: the windows holding it fire again), reported late where none is, as
`engine.Windowing` does.

The table is working state. Keyed state holds it per key group (dissertation §4.2;
`table_state.GroupSlices`, one entry per key group, `export`/`load`), so it is checkpointed,
restored and rescaled with its key groups.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from .columnar import key_codes
from .grid import Grid
from .store import SliceStore
from .table_firing import FiredColumns, TableFiring
from .table_partials import Reduction, SlicePartials, first_columns, value_dtype
from .table_slots import KeySlots
from .table_state import GroupSlices, slice_store


@dataclass(frozen=True, slots=True)
class TableAdmission:
    """What became of a batch's rows."""

    late_rows: np.ndarray  # rows too late for at least one query, ascending
    late_queries: list[tuple[str, ...]]  # per late row: the queries it is too late for
    late_updates: bool  # a row behind the watermark was counted: windows fire again


class SliceTable:
    """Every key's slices of one operator's periodic queries: rows of keys, columns of slices."""

    def __init__(self, grid: Grid, reduction: Reduction) -> None:
        self.grid = grid
        self.reduction = reduction
        self.slots = KeySlots()
        self.partials = SlicePartials(reduction, grid.edges, first_columns(grid))
        self.firing = TableFiring(grid)

    @property
    def has_changes(self) -> bool:
        """Late records changed windows that fire again at the next watermark."""
        return self.partials.has_changes

    # -- keys -----------------------------------------------------------------------------------

    def slots_of(self, keys: list[Any], group_of: Callable[[Any], int], fired: float) -> np.ndarray:
        """The slot of each key; a new key gets one (its key group from `group_of`, last fired
        at `fired`: no window ending by then can hold its records)."""
        slots = self.slots
        out = slots.find(keys)
        if -1 in out:
            self.reserve(out.count(-1))  # may move slots: look them up again
            out = slots.find(keys)
            for i, k in enumerate(keys):
                if out[i] == -1:
                    out[i] = slots.add(k, group_of(k), fired)
            self.partials.n = slots.n
            self.firing.keys_added(fired)
        return np.array(out, dtype=np.int64)

    def reserve(self, new_keys: int) -> None:
        """Room for `new_keys` more slots: drop empty ones, or grow (slots may move)."""
        slots = self.slots
        if slots.n + new_keys <= slots.capacity:
            return
        self.compact_rows()
        if slots.n + new_keys > slots.capacity:
            cap = max(16, 2 * (slots.n + new_keys))
            slots.grow(cap)
            self.partials.grow_rows(cap)

    def compact_rows(self, force: bool = False) -> None:
        """Drop the slots of keys that hold nothing (if that frees at least a quarter)."""
        n = self.slots.n
        if not n:
            return
        kept = np.flatnonzero(self.partials.live_rows())
        if len(kept) == n or (not force and len(kept) > 3 * n // 4):
            return
        self.slots.keep(kept)
        self.partials.keep_rows(kept)

    # -- adding ---------------------------------------------------------------------------------

    def add(self, keys: Any, ts: np.ndarray, values: np.ndarray | None, watermark: float,
            group_of: Callable[[Any], int], weights: np.ndarray | None = None) -> TableAdmission:
        """Add a batch: `keys` (Arrow, numpy or a list), `ts` (float64 seconds), `values`
        (numeric numpy, None for a count) at the operator's `watermark`; `weights`: how many
        records each row stands for (rows of partials from a local phase), else one each."""
        codes, distinct = key_codes(keys)
        if len(codes) != len(ts) or (values is not None and len(values) != len(ts)):
            raise ValueError(f"keys, timestamps and values differ in length: {len(codes)}, {len(ts)}, "
                             f"{'-' if values is None else len(values)}")
        if values is not None:
            dtype = value_dtype(values)
            if dtype is None:
                raise TypeError(f"{self.reduction.value} on the columnar path needs numbers, got {values.dtype}")
            self.partials.ensure_values(dtype)
        slots = self.slots_of(distinct, group_of, watermark)
        behind = np.flatnonzero(ts < watermark)
        late_rows: list[int] = []
        late_queries: list[tuple[str, ...]] = []
        updated = np.empty(0, dtype=np.int64)
        keep: np.ndarray | None = None
        if len(behind):
            keep = np.ones(len(ts), dtype=np.bool_)
            counted: list[int] = []
            for row, t in zip(behind.tolist(), ts[behind].tolist()):
                accepted, late = self._behind(t, watermark)
                if late:
                    late_rows.append(row)
                    late_queries.append(late)
                if accepted:
                    counted.append(row)
                else:
                    keep[row] = False
            updated = np.array(counted, dtype=np.int64)
        if keep is not None:
            kept = np.flatnonzero(keep)
            self.partials.fold(codes[kept], slots, ts[kept], None if values is None else values[kept],
                               np.searchsorted(kept, updated), None if weights is None else weights[kept])
        else:
            self.partials.fold(codes, slots, ts, values, updated, weights)
        return TableAdmission(np.array(late_rows, dtype=np.int64), late_queries, bool(len(updated)))

    def _behind(self, ts: float, watermark: float) -> tuple[bool, tuple[str, ...]]:
        """A row behind the watermark: whether some query counts it, and those it is late for
        (the rules of `Grid.add_behind`: late where every window holding it closed)."""
        accepted = False
        late: list[str] = []
        lateness = self.grid.lateness
        for name, w in zip(self.grid.names, self.grid.windows):
            end = w.end_of(w.last_start_index(ts))
            if end <= ts:
                continue  # a sampling gap: in no window of this query
            if end + lateness <= watermark:
                late.append(name)
            else:
                accepted = True
        return accepted, tuple(late)

    def fire(self, watermark: float) -> FiredColumns | None:
        """Every key's windows due at `watermark` (`TableFiring.fire`); call it whenever the
        watermark moves, before adding rows at the new watermark."""
        return self.firing.fire(self.slots, self.partials, watermark)

    # -- keyed state ----------------------------------------------------------------------------

    def export(self) -> dict[int, GroupSlices]:
        """Every key group's state (key groups holding nothing are left out)."""
        self.compact_rows(force=True)
        slots = self.slots
        n = slots.n
        out: dict[int, GroupSlices] = {}
        if not n:
            return out
        order = np.argsort(slots.groups[:n], kind="stable")
        groups = slots.groups[order]
        bounds = np.flatnonzero(np.r_[True, groups[1:] != groups[:-1]])
        for g, rows in zip(groups[bounds].tolist(), np.split(order, bounds[1:])):
            keys = tuple(slots.keys[i] for i in rows.tolist())
            out[g] = self.partials.group_slices(rows, keys, slots.fired[rows])
        return out

    def load(self, entries: Iterable[tuple[int, GroupSlices]]) -> None:
        """Add key groups' state (restored, or gained by rescaling)."""
        chosen = list(entries)
        if not chosen:
            return
        partials = self.partials
        partials.add_columns_of([e for _, e in chosen])
        for group, entry in chosen:
            self.reserve(len(entry.keys))
            slots = np.array([self.slots.add(k, group, f) for k, f in zip(entry.keys, entry.fired.tolist())],
                             dtype=np.int64)
            partials.n = self.slots.n
            partials.put(slots, entry)
        self.firing.state_loaded()
        partials.prefix.forget()

    def clear(self) -> None:
        """Forget everything (before loading the key groups a subtask owns now)."""
        self.__init__(self.grid, self.reduction)  # type: ignore[misc]

    def key_store(self, key: Any) -> SliceStore | None:
        """One key's slices as the per-key path's `SliceStore` (a live state query), or None."""
        slot = self.slots.slot_of.get(key)
        if slot is None:
            return None
        counts, values = self.partials.row(slot)
        return slice_store(float(self.slots.fired[slot]), counts, values, self.partials.starts, self.partials.ends)
