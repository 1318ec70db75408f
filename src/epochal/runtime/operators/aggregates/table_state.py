"""An aggregate table in keyed state: where the global phase's columnar state lives.

Keyed state is the state of record, the table the working state (as for the window slice table,
`operators/window_table.py`). Before a snapshot fixes the state, the table writes one
`GroupTable` per key group it changed into the state `__aggregates__`, keyed by the key group's
number, and deletes the entries of groups it no longer holds (ABS, Algorithm 1: the snapshot is
the state after the records before the barrier). A restore, a rescale or a migration rebuilds
the table from the entries of the key groups the subtask owns (`reload`).

Keys the per-key path holds (records came, or a checkpoint of an older version) are *absorbed*:
a key new to the table takes its partials from its per-key entries, which are deleted, so every
key's state lives in one place. When records come while the table holds keys, the table is
*dissolved* into per-key entries the same way round (`dissolve`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from ....state.contract import KeyedStateBackend
from ....state.group_tables import GROUP_TABLE_STATE, GroupTable
from ....state.keygroups import owned_key_group
from .functions import Accumulators, BatchAggregate
from .table import AggregateTable

_ABSENT = object()


class TableState:
    """One global phase's `AggregateTable`, kept in the backend's key groups."""

    def __init__(self, backend: KeyedStateBackend, aggregates: Sequence[BatchAggregate], states: Sequence[str],
                 track_unemitted: bool) -> None:
        self.backend = backend
        self.aggregates = list(aggregates)
        self.state_names = tuple(states)
        self.track_unemitted = track_unemitted
        self.table: AggregateTable | None = None
        self.written: set[int] = set()  # key groups with a GroupTable entry in keyed state
        self._absorb = False  # the backend may hold per-key entries of keys new to the table

    def _layout(self, table: AggregateTable) -> tuple[tuple[str, tuple[str, ...]], ...]:
        return tuple((state, tuple(labels[n] for n in agg.names))
                     for state, agg, labels in zip(self.state_names, self.aggregates, table.labels, strict=True))

    def ensure(self, key_type: pa.DataType) -> AggregateTable | None:
        """The table for keys of `key_type`; None when another key type holds it (then the
        per-key path runs: a column of another type is rare, and never mixed per key)."""
        table = self.table
        if table is None:
            table = self.table = AggregateTable(key_type, self.backend.max_parallelism, self.aggregates,
                                                track_unemitted=self.track_unemitted)
            self._absorb = any(next(iter(self.backend.keys(s)), None) is not None for s in self.state_names)
        return table if table.accepts(key_type) else None

    def new_keys(self, table: AggregateTable, slots: np.ndarray) -> None:
        """Slots just added: check they are this subtask's, and absorb their per-key entries."""
        groups = table.key_groups[slots]
        owned = self.backend.key_groups
        foreign = np.flatnonzero(~np.isin(groups, np.fromiter(owned, dtype=np.int64)))
        if len(foreign):  # routed to the wrong subtask: a bug, never something to aggregate
            key = table.keys_at(slots[foreign[:1]])[0].as_py()
            owned_key_group(key, int(groups[foreign[0]]), owned, self.backend.max_parallelism)  # raises
        if not self._absorb:
            return
        backend, found_slots, found = self.backend, [], []
        for slot, key, group in zip(slots.tolist(), table.keys_at(slots).to_pylist(), groups.tolist(), strict=True):
            backend.set_current_key(key, group)
            values = [backend.get(s, _ABSENT) for s in self.state_names]
            if any(v is _ABSENT for v in values):
                continue
            for s in self.state_names:
                backend.delete(s)
            found_slots.append(slot)
            found.append(values)
        if found:
            partials = [agg.from_partials([v[i] for v in found]) for i, agg in enumerate(self.aggregates)]
            table.merge(np.asarray(found_slots, dtype=np.int64), partials, replace=True)

    # -- keyed state ------------------------------------------------------------------------------
    def flush(self) -> None:
        """Write the changed key groups into keyed state (before a snapshot)."""
        table = self.table
        if table is None:
            return
        backend = self.backend
        for group, entry in table.export(self._layout(table)).items():
            backend.set_current_key(group, group)
            if len(entry):
                backend.put(GROUP_TABLE_STATE, entry)
                self.written.add(group)
            else:
                backend.delete(GROUP_TABLE_STATE)
                self.written.discard(group)

    def reload(self) -> None:
        """Rebuild the table from keyed state (after a restore, or a change of key groups)."""
        backend = self.backend
        entries: list[GroupTable] = []
        self.table, self.written = None, set()
        for group, key in list(backend.keys(GROUP_TABLE_STATE)):
            backend.set_current_key(key, group)
            entry = backend.get(GROUP_TABLE_STATE)
            if isinstance(entry, GroupTable) and len(entry):
                entries.append(entry)
                self.written.add(group)
        if entries:
            table = self.ensure(entries[0].keys.type)
            assert table is not None
            table.load(entries)

    def dissolve(self) -> list[tuple[Any, int]]:
        """Move every key of the table into per-key entries and drop the table (records came);
        returns the keys not yet emitted, with their key groups."""
        table, self.table = self.table, None
        if table is None:
            return []
        backend = self.backend
        for group in sorted(self.written):
            backend.set_current_key(group, group)
            backend.delete(GROUP_TABLE_STATE)
        self.written = set()
        slots = table.present_slots()
        unemitted: set[int] = set(table.take_unemitted().tolist()) if self.track_unemitted else set()
        keys, groups = table.keys_at(slots).to_pylist(), table.key_groups[slots].tolist()
        partials = self.partials(table, slots)
        pending: list[tuple[Any, int]] = []
        for i, (slot, key, group) in enumerate(zip(slots.tolist(), keys, groups, strict=True)):
            backend.set_current_key(key, group)
            for state, values in zip(self.state_names, partials, strict=True):
                backend.put(state, values[i])
            if slot in unemitted:
                pending.append((key, group))
        return pending

    def partials(self, table: AggregateTable, slots: np.ndarray) -> list[list[Any]]:
        """Per aggregate, the per-key partials of `slots` (as the per-key path holds them)."""
        out = []
        for agg, acc in zip(self.aggregates, table.gather(slots), strict=True):
            out.append([agg.partial_value({n: acc[n][i] for n in agg.names}) for i in range(len(slots))])
        return out

    def query(self, key: Any) -> dict[str, Any]:
        """The key's partials by state name, as the per-key path would hold them ({}: none)."""
        table = self.table
        slot = None if table is None else table.find(key)
        if table is None or slot is None:
            return {}
        partials = self.partials(table, np.array([slot], dtype=np.int64))
        return {state: values[0] for state, values in zip(self.state_names, partials, strict=True)}

    def results(self, slots: np.ndarray) -> tuple[pa.Array, list[Accumulators]]:
        """The keys of `slots` and their accumulators."""
        assert self.table is not None
        return self.table.keys_at(slots), self.table.gather(slots)
