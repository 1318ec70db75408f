"""Running counts per key for Arrow batches, held in numpy: the working state of a columnar count.

The keyed-state backend stays the state of record. Snapshots, incremental checkpoints, rescaling
and the state reader see counts only there, in their key groups (dissertation §4.2). This table
is a write-back cache in front of it: a batch adds to numpy counts by slot (`KeyIndex`), and
`flush` writes the counts changed since the last flush into the backend — once per checkpoint,
in the synchronous part of the snapshot, so the state a barrier fixes is exactly the state after
the records before it (ABS, Algorithm 1). A key new to the table starts from the backend's count,
which is how restored and rescaled state comes back in.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from ...state.contract import RawMapBackend
from ...state.keygroups import owned_key_group
from ..key_index import GrowableArray, KeyIndex


class ColumnarCounts:
    """Counts by slot of a `KeyIndex`, flushed into one state of a backend with raw key-group maps."""

    def __init__(
        self, key_type: pa.DataType, backend: RawMapBackend, state: str, track_unemitted: bool = False
    ) -> None:
        self.index = KeyIndex(key_type, backend.max_parallelism)
        self.backend = backend
        self.state = state
        self._counts = GrowableArray(np.int64)
        self._changed = GrowableArray(np.bool_, False)  # changed since the last flush
        # changed since the last `take_unemitted` (an operator that emits once per epoch)
        self._unemitted = GrowableArray(np.bool_, False) if track_unemitted else None
        # Only this table writes the state while it lives, so if the backend holds none of it
        # now, a key new to the table is new to the backend too: its count so far is 0.
        self._backend_empty = next(iter(backend.keys(state)), None) is None

    def accepts(self, key_type: pa.DataType) -> bool:
        return self.index.accepts(key_type)

    def add(self, distinct: pa.Array, increments: np.ndarray) -> np.ndarray:
        """Add `increments[i]` to the count of `distinct[i]`; returns the counts before."""
        slots, added = self.index.lookup(distinct)
        if added.any():
            self._load(np.sort(slots[added]))
        counts = self._counts.values
        before: np.ndarray = counts[slots]
        counts[slots] = before + increments
        self._changed.values[slots] = True
        if self._unemitted is not None:
            self._unemitted.values[slots] = True
        return before

    def take_unemitted(self) -> tuple[pa.Array, np.ndarray]:
        """The keys changed since the last call and their counts now (first-seen order)."""
        assert self._unemitted is not None
        slots = np.flatnonzero(self._unemitted.values)
        self._unemitted.values[slots] = False
        return self.index.keys_at(slots), self._counts.values[slots]

    def _load(self, new_slots: np.ndarray) -> None:
        """Counts so far of keys new to the table: restored ones are in the backend, others 0."""
        assert new_slots[0] == len(self._counts) and new_slots[-1] == len(self.index) - 1
        groups = self.index.key_groups[new_slots]
        owned = self.backend.key_groups
        foreign = np.flatnonzero(~np.isin(groups, np.fromiter(owned, dtype=np.int64)))
        if len(foreign):  # routed to the wrong subtask: a bug, never something to count
            slot = new_slots[foreign[:1]]
            key = self.index.keys_at(slot)[0].as_py()
            owned_key_group(key, int(groups[foreign[0]]), owned, self.backend.max_parallelism)  # raises
        if self._unemitted is not None:
            self._unemitted.extend(np.zeros(len(new_slots), dtype=np.bool_))
        if self._backend_empty:
            self._counts.extend(np.zeros(len(new_slots), dtype=np.int64))
            self._changed.extend(np.zeros(len(new_slots), dtype=np.bool_))
            return
        backend = self.backend
        keys = self.index.keys_at(new_slots).to_pylist()
        loaded = np.empty(len(keys), dtype=np.int64)
        for i, (key, key_group) in enumerate(zip(keys, groups.tolist(), strict=False)):
            backend.set_current_key(key, key_group)
            loaded[i] = backend.get(self.state, 0)
        self._counts.extend(loaded)
        self._changed.extend(np.zeros(len(keys), dtype=np.bool_))

    def flush(self) -> None:
        """Write the counts changed since the last flush into the backend, marked changed there."""
        changed = self._changed.values
        slots = np.flatnonzero(changed)
        if not len(slots):
            return
        groups = self.index.key_groups[slots]
        order = np.argsort(groups, kind="stable")
        slots, groups = slots[order], groups[order]
        keys = self.index.keys_at(slots).to_pylist()
        counts = self._counts.values[slots].tolist()
        bounds = np.flatnonzero(np.diff(groups)) + 1
        starts = [0, *bounds.tolist()]
        ends = [*bounds.tolist(), len(slots)]
        for start, end in zip(starts, ends, strict=False):
            key_group = int(groups[start])
            chunk = keys[start:end]
            self.backend.raw_map(self.state, key_group).update(zip(chunk, counts[start:end], strict=False))
            self.backend.mark_changed(self.state, key_group, chunk)
        changed[slots] = False
