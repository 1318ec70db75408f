"""Firing a slice table: every due window of every key in one pass at a watermark.

The due windows are enumerated per query by arithmetic, once for all keys: those ending in
`(fired, watermark]` (on time, from the `WindowCalendar`) and, when late records changed cells,
the complete windows still open for late records (`end + allowed_lateness > fired`, from the
`QueryIndex`). Each window covers a range of columns (slices never straddle a window
boundary); its result for every key is Cutty's `lookup(start, end)` (dissertation §5.5.2,
Algorithm 8; `SlicePartials.results`). A key gets a result for a window only if it had records
there (and, for a re-firing, a changed cell). Results come window by window, ordered by (end,
start, query), keys in slot order within a window; each key's results are in the per-key path's
order. After a firing, the slices no open window needs are purged (Algorithm 8's `store.purge`).

Lateness and re-firing follow `engine.Windowing` exactly: each key keeps the watermark it was
last fired at (`KeySlots.fired`), and every complete, still-open window holding a changed cell
of a key fires again with the updated result.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from .calendar import WindowCalendar
from .grid import Grid
from .query_index import QueryIndex
from .store import Firing
from .table_partials import SlicePartials
from .table_slots import KeySlots

_CELLS = 1 << 20  # keys x windows computed at once (bounds the memory of a firing)


@dataclass(frozen=True, slots=True)
class FiredColumns:
    """Window results of many keys, one entry per (window, key)."""

    keys: pa.Array | list[Any]
    query: np.ndarray  # index of the query
    start: np.ndarray
    end: np.ndarray
    result: np.ndarray
    late_update: np.ndarray  # bool: a re-firing (Firing.LATE_UPDATE), else Firing.ON_TIME
    windows: np.ndarray | None = None  # the query of each window, when each holds every key in slot order

    def __len__(self) -> int:
        return len(self.query)

    def firings(self) -> list[Firing]:
        return [Firing.LATE_UPDATE if u else Firing.ON_TIME for u in self.late_update.tolist()]

    def key_list(self) -> list[Any]:
        return self.keys.to_pylist() if isinstance(self.keys, pa.Array) else list(self.keys)


class TableFiring:
    """When a table's windows are due, and firing them: the queries' calendar and index, and
    `due_at`, a lower bound of the next window end (before it, a firing is skipped)."""

    def __init__(self, grid: Grid) -> None:
        self.lateness = grid.lateness
        self.index = QueryIndex(grid.windows)
        self.calendar = WindowCalendar(grid.windows, grid.lateness, grid.edges)  # what fires when
        self.due_at = -math.inf  # no window ends before this (a lower bound): firing is skipped

    def keys_added(self, fired: float) -> None:
        """New keys last fired at `fired`: a window ending after it may be due."""
        self.due_at = min(self.due_at, self.calendar.first_end_after(fired))

    def state_loaded(self) -> None:
        """Key groups' state was loaded: anything may be due."""
        self.due_at = -math.inf

    def fire(self, slots: KeySlots, partials: SlicePartials, watermark: float) -> FiredColumns | None:
        """Emit the windows due at `watermark` for every key, then free what no window needs."""
        n = slots.n
        fired = slots.fired[:n]
        if not n or not partials.ncols:
            np.maximum(fired, watermark, out=fired)
            self._purge(slots, partials, float(fired.min()) if n else math.inf)
            return None
        changes = partials.has_changes
        low = float(fired.min())
        if low >= watermark and not changes:
            return None
        if watermark < self.due_at and not changes:  # no window ends yet: nothing to emit
            np.maximum(fired, watermark, out=fired)
            self._purge(slots, partials, watermark)  # every key was behind it
            return None
        parts: list[tuple[Any, ...]]
        uniform = low == float(fired.max())
        if uniform and low <= watermark and not changes:  # the usual firing: see _fire_every_key
            found = self._fire_every_key(slots, partials, low, watermark)
            fired[:] = watermark
            self._purge(slots, partials, watermark)
            return found
        if uniform and low <= watermark:  # every key fired together, and is due
            parts = self._fire_rows(slots, partials, slice(0, n), low, watermark)
            fired[:] = watermark
        else:
            parts = []
            due = fired <= watermark if changes else fired < watermark  # late updates fire again at once
            for p in np.unique(fired[due]).tolist():
                rows = np.flatnonzero(fired == p)
                parts.extend(self._fire_rows(slots, partials, rows, float(p), watermark))
                fired[rows] = watermark
        if partials.has_changes:
            partials.spend_changes(fired > watermark)  # fired now: their flags are spent
        self._purge(slots, partials, float(fired.min()))
        return _assemble(slots, parts)

    def _purge(self, slots: KeySlots, partials: SlicePartials, low: float) -> None:
        """Drop the slices no window open at `low`, the lowest `fired`, can need; note when a
        window is next due."""
        if low > -math.inf:
            partials.purge(self.calendar.first_open_start(low))
        self.due_at = self.calendar.first_end_after(low) if slots.n else math.inf

    def _fire_every_key(self, slots: KeySlots, partials: SlicePartials, previous: float,
                        watermark: float) -> FiredColumns | None:
        """The usual firing, with as few steps as it takes (it runs at every watermark, so its
        fixed cost grows with how many watermarks find a window due, i.e. with the number of
        windows): every key last fired at `previous`, no late record changed a cell. The due
        windows are the calendar's, their results every key's in slot order, unless some key had
        no record in one."""
        starts, calendar = partials.starts, self.calendar
        query, start, end = calendar.ending_between(max(previous, float(starts[0])),
                                                    min(watermark, float(starts[-1]) + calendar.max_size))
        if not len(query):
            return None
        a = starts.searchsorted(start)
        b = starts.searchsorted(end)
        holding = a < b
        if not holding.all():
            query, start, end, a, b = query[holding], start[holding], end[holding], a[holding], b[holding]
            if not len(query):
                return None
        n, windows = slots.n, len(query)
        if windows * n > _CELLS:  # bound a firing's memory: in chunks
            return _assemble(slots, self._fire_rows(slots, partials, slice(0, n), previous, watermark))
        present, result = partials.results(slice(0, n), a, b, None)
        if present is None:  # every key had records in every due window
            rows = windows * n
            return FiredColumns(slots.key_array(windows), query.repeat(n), start.repeat(n), end.repeat(n),
                                result.reshape(rows), np.zeros(rows, dtype=np.bool_), query)
        w, r = np.nonzero(present)
        return FiredColumns(slots.key_array(r), query[w], start[w], end[w], result[w, r],
                            np.zeros(len(w), dtype=np.bool_))

    def _fire_rows(self, slots: KeySlots, partials: SlicePartials, rows: slice | np.ndarray, previous: float,
                   watermark: float) -> list[tuple[Any, ...]]:
        """The windows of the keys in `rows` (every slot, or an array of slots; all last fired
        at `previous`) due at `watermark`, as `(slots, query, start, end, result, late)` columns
        with `slots` an int `w` for every slot in order, `w` times over."""
        index, starts, calendar, lateness = self.index, partials.starts, self.calendar, self.lateness
        first, last = float(starts[0]), float(starts[-1])
        # windows ending by the watermark that hold a slice: none starts after the last slice
        query, start, end = calendar.ending_between(max(previous, first), min(watermark, last + calendar.max_size))
        late: np.ndarray | None = None  # None: no window fires again
        if math.isfinite(previous) and partials.changed_in(rows):
            hi = index.last_start(last) + 1
            low = index.first_end(max(previous - lateness, first)) - 1
            r_query, r_start, r_end = index.windows(low, np.minimum(hi, index.first_end(previous)))
            open_ = (r_end + lateness > previous) & (r_end > first) & (r_end <= previous)
            query, start, end = (np.concatenate([a, b[open_]]) for a, b in ((query, r_query), (start, r_start),
                                                                             (end, r_end)))
            late = np.concatenate([np.zeros(len(query) - int(open_.sum()), dtype=np.bool_),
                                   np.ones(int(open_.sum()), dtype=np.bool_)])
        a = starts.searchsorted(start)
        b = starts.searchsorted(end)
        holding = a < b
        if not holding.all():
            query, start, end, a, b = query[holding], start[holding], end[holding], a[holding], b[holding]
            late = None if late is None else late[holding]
        if not len(query):
            return []
        if late is not None and len(query) > 1 and late.any():  # the calendar's come in order; re-fired join them
            order = np.lexsort((query, start, end))
            query, start, end, late, a, b = query[order], start[order], end[order], late[order], a[order], b[order]
        some = None if isinstance(rows, slice) else rows  # None: every slot
        keys = slots.n if some is None else len(some)
        step = max(1, _CELLS // max(1, keys))
        out: list[tuple[Any, ...]] = []
        for i in range(0, len(query), step):
            chunk = slice(i, i + step)
            c_late = None if late is None else late[chunk]
            present, result = partials.results(rows, a[chunk], b[chunk], c_late)
            windows = len(result)
            if present is None:  # the usual case: every key had records in every due window
                every: Any = windows if some is None else np.tile(some, windows)  # see KeySlots.key_array
                out.append((every, query[chunk].repeat(keys), start[chunk].repeat(keys), end[chunk].repeat(keys),
                            result.reshape(-1),
                            np.zeros(windows * keys, dtype=np.bool_) if c_late is None else c_late.repeat(keys)))
                continue
            w, r = np.nonzero(present)
            if len(w):
                slot_ids = np.arange(slots.n)[rows]
                out.append((slot_ids[r], query[chunk][w], start[chunk][w], end[chunk][w], result[w, r],
                            np.zeros(len(w), dtype=np.bool_) if c_late is None else c_late[w]))
        return out


def _assemble(slots: KeySlots, parts: list[tuple[Any, ...]]) -> FiredColumns | None:
    """One `FiredColumns` of `_fire_rows`' parts."""
    n = slots.n
    if not parts:
        return None
    if len(parts) == 1:
        every, query, start, end, result, late = parts[0]
        if isinstance(every, int):  # every key in every window: the window of each run of rows
            return FiredColumns(slots.key_array(every), query, start, end, result, late, query[::n])
    else:
        all_slots = np.arange(n)
        parts = [(np.tile(all_slots, p[0]) if isinstance(p[0], int) else p[0], *p[1:]) for p in parts]
        every, query, start, end, result, late = (np.concatenate(c) for c in zip(*parts))
    return FiredColumns(slots.key_array(every), query, start, end, result, late)
