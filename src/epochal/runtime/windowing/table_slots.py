"""The rows of a slice table: one slot per key, with its key group and the watermark it last fired at.

A slice table (`table.SliceTable`) keeps every key's partials in the rows of its matrices; this
directory says which key a row holds. A key keeps the watermark it was last fired at (`fired`),
so key groups restored from subtasks at different watermarks (dissertation §4.2: key groups are
the unit of restore and rescaling) fire each key exactly as its own store would have. Slots of
keys that hold nothing are given up (`keep`); `version` tells caches of the keys that slots moved.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

_KEY_RUNS = 8  # every key w times over, kept for this many w (Arrow arrays: shared, never changed)


class KeySlots:
    """Slots `[0, n)`: `keys[slot]`, its key group `groups[slot]`, its `fired` watermark.

    `groups` and `fired` are allocated for `capacity` slots (the matrices' rows); `slot_of`
    finds a key's slot.
    """

    def __init__(self) -> None:
        self.keys: list[Any] = []
        self.slot_of: dict[Any, int] = {}
        self.n = 0
        self.groups = np.empty(0, dtype=np.int64)
        self.fired = np.empty(0, dtype=np.float64)
        self.version = 0  # bumped when keys are added or slots move (caches of `keys` go stale)
        # (version, every key as Arrow, {w: every key w times over}): see `key_array`
        self._arrays: tuple[int, pa.Array | None, dict[int, pa.Array]] | None = None

    @property
    def capacity(self) -> int:
        return len(self.fired)

    def find(self, keys: list[Any]) -> list[int]:
        """The slot of each key, -1 for a key without one."""
        slot_of = self.slot_of
        return [slot_of.get(k, -1) for k in keys]

    def grow(self, capacity: int) -> None:
        self.groups = np.resize(self.groups, capacity)
        self.fired = np.resize(self.fired, capacity)

    def add(self, key: Any, group: int, fired: float) -> int:
        """A slot for a new key (within `capacity`)."""
        slot = self.n
        self.keys.append(key)
        self.slot_of[key] = slot
        self.groups[slot] = group
        self.fired[slot] = fired
        self.n = slot + 1
        self.version += 1
        return slot

    def keep(self, kept: np.ndarray) -> None:
        """Keep only the slots `kept` (ascending), moved to `[0, len(kept))`."""
        m = len(kept)
        self.keys = [self.keys[i] for i in kept.tolist()]
        self.slot_of = {k: i for i, k in enumerate(self.keys)}
        self.groups[:m] = self.groups[kept]
        self.fired[:m] = self.fired[kept]
        self.n = m
        self.version += 1

    def key_array(self, slots: np.ndarray | int) -> pa.Array | list[Any]:
        """The key of each slot, as Arrow (one cached array of every key) or, if Arrow cannot hold
        the keys, a list; `slots` an int `w`: every slot in order, `w` times over."""
        cached = self._arrays
        if cached is None or cached[0] != self.version:
            try:
                array: pa.Array | None = pa.array(self.keys)
            except (pa.ArrowInvalid, pa.ArrowTypeError):
                array = None
            cached = self._arrays = (self.version, array, {})
        array, runs = cached[1], cached[2]
        if isinstance(slots, int):
            if array is not None:  # the same few numbers of windows come again and again
                found = runs.get(slots)
                if found is None:
                    if len(runs) >= _KEY_RUNS:
                        runs.clear()
                    found = runs[slots] = pa.concat_arrays([array] * slots)
                return found
            slots = np.tile(np.arange(self.n), slots)
        if array is None:
            keys = self.keys
            return [keys[i] for i in slots.tolist()]
        return array.take(pa.array(slots))
