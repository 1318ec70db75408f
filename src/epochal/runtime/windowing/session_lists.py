"""A session table's rows: numpy columns with a free list, and one linked list per (query, key).

Why lists: a batch touches the sessions of the keys in it, a few per key, while the table may
hold a million keys' open sessions (a day of clickstream). Finding a batch's keys by scanning
every row, and rebuilding the columns around them, cost O(table) per batch (31 ms per batch of
1,000 rows at a million sessions). Here each (query, key) lane links its sessions in start order
(`head`, `next`), so a batch walks only its own lanes, a step per session of the longest (a
handful), vectorized over lanes; merged sessions take the rows their parts freed (`free`).
Firing still reads the `end` and `changed` columns whole, once per watermark that can find
something due.
"""

from __future__ import annotations

import numpy as np

from .session_columns import SessionRows

_FIRST_ROWS = 64


class SessionLists:
    """Rows `[0, capacity)` of session columns; `live[r]`: row r holds a session. `head[q, s]`
    is the first row (smallest start) of query q's sessions of key slot s, -1 if none; `next[r]`
    the row after r in its lane."""

    def __init__(self, queries: int, dtype: np.dtype | None) -> None:
        self.queries = queries
        self.head = np.full((queries, 16), -1, np.int64)
        self.free = np.arange(_FIRST_ROWS - 1, -1, -1, dtype=np.int64)  # a stack of rows to use: [0, free_n)
        self.free_n = _FIRST_ROWS
        self.columns = SessionRows(
            np.zeros(_FIRST_ROWS, np.int64), np.zeros(_FIRST_ROWS, np.int64), np.zeros(_FIRST_ROWS, np.float64),
            np.zeros(_FIRST_ROWS, np.float64), np.zeros(_FIRST_ROWS, np.int64),
            None if dtype is None else np.zeros(_FIRST_ROWS, dtype), np.zeros(_FIRST_ROWS, np.bool_))
        self.next = np.full(_FIRST_ROWS, -1, np.int64)
        self.live = np.zeros(_FIRST_ROWS, np.bool_)
        self.count = 0  # live rows

    def __len__(self) -> int:
        return self.count

    @property
    def value_dtype(self) -> np.dtype | None:
        value = self.columns.value
        return None if value is None else value.dtype

    def with_values(self, dtype: np.dtype) -> None:
        """Partials of `dtype` from now on (a count has none; integers turn to floats)."""
        c = self.columns
        value = np.zeros(len(c.slot), dtype) if c.value is None else c.value.astype(dtype)
        self.columns = SessionRows(c.slot, c.query, c.start, c.end, c.count, value, c.changed)

    def slots(self, capacity: int) -> None:
        """Room for key slots `[0, capacity)`."""
        if capacity > self.head.shape[1]:
            head = np.full((self.queries, capacity), -1, np.int64)
            head[:, :self.head.shape[1]] = self.head
            self.head = head

    # -- reading --------------------------------------------------------------------------------

    def rows(self) -> np.ndarray:
        """Every live row."""
        return np.flatnonzero(self.live)

    def take(self, rows: np.ndarray) -> SessionRows:
        return self.columns.take(rows)

    def lane_rows(self, query: np.ndarray, slot: np.ndarray) -> np.ndarray:
        """Every row of the lanes (query[i], slot[i]) (distinct lanes)."""
        found: list[np.ndarray] = []
        at = self.head[query, slot]
        at = at[at >= 0]
        nxt = self.next
        while len(at):
            found.append(at)
            at = nxt[at]
            at = at[at >= 0]
        return np.concatenate(found) if found else np.empty(0, np.int64)

    # -- changing -------------------------------------------------------------------------------

    def replace(self, old: np.ndarray, new: SessionRows) -> np.ndarray:
        """Free the rows `old` (whole lanes) and write `new` (sessions ordered by lane and start,
        covering every lane `old` held) in their place; the rows `new` went to."""
        self._release(old)
        rows = self._allocate(len(new))
        c = self.columns
        c.slot[rows], c.query[rows], c.start[rows], c.end[rows] = new.slot, new.query, new.start, new.end
        c.count[rows], c.changed[rows] = new.count, new.changed
        if c.value is not None:
            assert new.value is not None
            c.value[rows] = new.value
        self.live[rows] = True
        self.count += len(rows)
        self._link(rows, new)
        return rows

    def drop(self, rows: np.ndarray) -> None:
        """Free the rows `rows`: the first sessions of their lanes (their smallest starts)."""
        if not len(rows):
            return
        self.live[rows] = False
        self.count -= len(rows)
        c = self.columns
        lanes_q, lanes_s = c.query[rows], c.slot[rows]
        at = self.head[lanes_q, lanes_s]  # walk each lane past its freed rows
        live, nxt = self.live, self.next
        while True:
            dead = (at >= 0) & ~live[np.maximum(at, 0)]
            if not dead.any():
                break
            at = np.where(dead, nxt[np.maximum(at, 0)], at)
        self.head[lanes_q, lanes_s] = at
        self._push(rows)

    def move_slots(self, moved: np.ndarray, kept: np.ndarray) -> None:
        """Key slots were given up: slot s is now `moved[s]` (`kept`: the old slots that stay)."""
        live = self.rows()
        self.columns.slot[live] = moved[self.columns.slot[live]]
        head = np.full_like(self.head, -1)
        head[:, :len(kept)] = self.head[:, kept]
        self.head = head

    def _release(self, rows: np.ndarray) -> None:
        if len(rows):
            self.live[rows] = False
            self.count -= len(rows)
            self._push(rows)

    def _push(self, rows: np.ndarray) -> None:
        top = self.free_n
        self.free[top:top + len(rows)] = rows
        self.free_n = top + len(rows)

    def _allocate(self, n: int) -> np.ndarray:
        if n > self.free_n:
            self._grow(max(2 * len(self.live), len(self.live) + n))
        top = self.free_n - n
        rows = self.free[top:self.free_n][::-1].copy()
        self.free_n = top
        return rows

    def _grow(self, capacity: int) -> None:
        old = len(self.live)
        c = self.columns
        self.columns = SessionRows(
            np.resize(c.slot, capacity), np.resize(c.query, capacity), np.resize(c.start, capacity),
            np.resize(c.end, capacity), np.resize(c.count, capacity),
            None if c.value is None else np.resize(c.value, capacity), np.resize(c.changed, capacity))
        self.next = np.resize(self.next, capacity)
        self.live = np.concatenate([self.live, np.zeros(capacity - old, np.bool_)])
        free = np.empty(capacity, np.int64)  # the new rows under the free ones: those are used first
        added = capacity - old
        free[:added] = np.arange(capacity - 1, old - 1, -1, dtype=np.int64)
        free[added:added + self.free_n] = self.free[:self.free_n]
        self.free, self.free_n = free, added + self.free_n

    def _link(self, rows: np.ndarray, new: SessionRows) -> None:
        """Chain `rows` (holding `new`, ordered by lane and start) lane by lane."""
        if not len(rows):
            return
        same = (new.query[1:] == new.query[:-1]) & (new.slot[1:] == new.slot[:-1])
        nxt = np.full(len(rows), -1, np.int64)
        nxt[:-1] = np.where(same, rows[1:], -1)
        self.next[rows] = nxt
        first = np.r_[True, ~same]
        self.head[new.query[first], new.slot[first]] = rows[first]
