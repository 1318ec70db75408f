"""The columnar aggregate table: every key's accumulators in numpy, found by a `KeyIndex`.

One row (slot) per key, one column per accumulator of each aggregate. A batch merges its
partials into the rows of its distinct keys in a few array operations (`merge`), so the per-key
work of a keyed aggregation is vectorized end to end (issue 36). The global phase's table is
the operator's working state; `export` writes it into keyed state as one `GroupTable` per key
group that changed, so it checkpoints, restores, rescales and migrates with its key groups
(dissertation §4.2), and `load` rebuilds rows from such entries. A local phase uses one too,
without key groups (it never routes and keeps nothing across a barrier).

A row is `present` once it holds a partial: a merge into an absent row takes the partial as is,
so no aggregate needs an identity (min and max have none).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from ....state.group_tables import GroupTable
from ...key_columns import GrowableArray
from ...key_index import KeyIndex
from .functions import Accumulators, BatchAggregate


def labels_of(aggregates: Sequence[BatchAggregate]) -> list[dict[str, str]]:
    """Per aggregate, accumulator name → column label (`plan.aggregates.partial_columns`)."""
    out = []
    for agg in aggregates:
        name = agg.call.name
        out.append({a: name if len(agg.names) == 1 else f"{name}.{a}" for a in agg.names})
    return out


class AggregateTable:
    """Accumulators by slot for one key type; `present`, `dirty` (since the last export) and
    `unemitted` (since the last `take_unemitted`, when tracked) per slot."""

    def __init__(
        self, key_type: pa.DataType, max_parallelism: int, aggregates: Sequence[BatchAggregate], *,
        key_groups: bool = True, track_unemitted: bool = False,
    ) -> None:
        self.index = KeyIndex(key_type, max_parallelism, key_groups)
        self.aggregates = list(aggregates)
        self.labels = labels_of(self.aggregates)
        self._columns: dict[str, GrowableArray] = {}
        self._present = GrowableArray(np.bool_, False)
        self._dirty = GrowableArray(np.bool_, False)
        self._unemitted = GrowableArray(np.bool_, False) if track_unemitted else None

    def __len__(self) -> int:
        return len(self._present)

    def accepts(self, key_type: pa.DataType) -> bool:
        return self.index.accepts(key_type)

    @property
    def key_groups(self) -> np.ndarray:
        return self.index.key_groups

    # -- rows -------------------------------------------------------------------------------------
    def slots(self, distinct: pa.Array, hashes: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """The rows of distinct keys (`hashes`: theirs, if known), adding the unseen ones
        (absent): `(slots, added)`."""
        slots, added = self.index.lookup(distinct, hashes)
        n = len(self.index)
        if n > len(self._present):
            for flags in (self._present, self._dirty, self._unemitted):
                if flags is not None:
                    flags.grow_to(n)
            for column in self._columns.values():
                column.grow_to(n)
        return slots, added

    def present(self, slots: np.ndarray) -> np.ndarray:
        return self._present.values[slots]

    def _column(self, label: str, dtype: np.dtype[Any]) -> np.ndarray:
        column = self._columns.get(label)
        if column is None:
            column = self._columns[label] = GrowableArray(dtype)
            column.grow_to(len(self))
        elif column.dtype != dtype and np.result_type(column.dtype, dtype) != column.dtype:
            column.astype(np.result_type(column.dtype, dtype))  # e.g. an int sum meets floats
        return column.values

    def gather(self, slots: np.ndarray) -> list[Accumulators]:
        """The accumulators of `slots` (copies; meaningful where `present`)."""
        out = []
        for agg, labels in zip(self.aggregates, self.labels, strict=True):
            acc = {}
            for name in agg.names:
                column = self._columns.get(labels[name])
                acc[name] = column.values[slots] if column is not None else np.zeros(len(slots), dtype=np.int64)
            out.append(acc)
        return out

    def merge(self, slots: np.ndarray, partials: Sequence[Accumulators], replace: bool = False) -> None:
        """Merge each aggregate's partials into distinct `slots` (`replace`: overwrite instead)."""
        present = self._present.values[slots]
        every, none = bool(present.all()), not present.any()
        for agg, labels, partial in zip(self.aggregates, self.labels, partials, strict=True):
            for name, ufunc in agg.merges.items():
                new = np.asarray(partial[name])
                values = self._column(labels[name], new.dtype)
                if replace or none:
                    values[slots] = new
                elif every:
                    values[slots] = ufunc(values[slots], new)
                else:
                    values[slots] = np.where(present, ufunc(values[slots], new), new)
        self._present.values[slots] = True
        self._dirty.values[slots] = True
        if self._unemitted is not None:
            self._unemitted.values[slots] = True

    def forget(self, slots: np.ndarray) -> None:
        """Mark `slots` absent (a local phase after it shipped them); the keys keep their rows."""
        self._present.values[slots] = False

    # -- reading ----------------------------------------------------------------------------------
    def present_slots(self) -> np.ndarray:
        return np.flatnonzero(self._present.values)

    def keys_at(self, slots: np.ndarray) -> pa.Array:
        return self.index.keys_at(slots)

    def take_unemitted(self) -> np.ndarray:
        """The slots changed since the last call (first-seen order), now marked emitted."""
        assert self._unemitted is not None
        flags = self._unemitted.values
        slots = np.flatnonzero(flags)
        flags[slots] = False
        return slots

    def find(self, key: Any) -> int | None:
        """The slot holding `key`, or None (a state query: never adds the key)."""
        try:
            probe = pa.array([key], self.index.key_type)
        except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
            return None
        slot = int(self.index.lookup_existing(probe)[0])
        return slot if slot >= 0 and self._present.values[slot] else None

    # -- keyed state ------------------------------------------------------------------------------
    def export(self, states: tuple[tuple[str, tuple[str, ...]], ...], everything: bool = False
               ) -> dict[int, GroupTable]:
        """A `GroupTable` of every key group with a row changed since the last export (all key
        groups holding rows, with `everything`); clears the changed marks."""
        n = len(self)
        dirty = self._dirty.values
        groups = self.index.key_groups[:n]
        present = self._present.values
        if everything:
            rows = np.flatnonzero(present)
            touched = np.zeros(0, dtype=np.int64)
        else:
            touched_mask = np.bincount(groups[dirty], minlength=self.index.max_parallelism) > 0
            touched = np.flatnonzero(touched_mask)
            if not len(touched):
                return {}
            rows = np.flatnonzero(present & touched_mask[groups])
        dirty[:] = False
        # key groups are below 2**15: a 16-bit stable argsort is a radix sort, in linear time
        order = np.argsort(groups[rows].astype(np.int16), kind="stable")
        rows = rows[order]
        row_groups = groups[rows]
        bounds = np.flatnonzero(np.diff(row_groups)) + 1
        keys = self.index.keys_at(rows)
        columns = {label: c.values[rows] for label, c in self._columns.items()}
        out: dict[int, GroupTable] = {}
        starts = [0, *bounds.tolist()]
        ends = [*bounds.tolist(), len(rows)]
        for start, end in zip(starts, ends, strict=True):
            if end > start:  # a compact copy: pickling a slice would write its parent's buffers
                group_keys = pa.concat_arrays([keys.slice(start, end - start)])
                out[int(row_groups[start])] = GroupTable(
                    group_keys, {label: v[start:end].copy() for label, v in columns.items()}, states)
        if not everything:  # touched groups left without rows: their entries go
            for group in touched.tolist():
                out.setdefault(int(group), GroupTable(pa.array([], self.index.key_type), {}, states))
        return out

    def load(self, entries: Iterable[GroupTable]) -> None:
        """Add rows from stored tables (a restore, a rescale, groups gained by a migration)."""
        chosen = [e for e in entries if len(e)]
        if not chosen:
            return
        keys = pa.concat_arrays([e.keys.cast(self.index.key_type) for e in chosen])
        slots, _ = self.slots(keys)
        partials: list[Accumulators] = []
        for agg, labels in zip(self.aggregates, self.labels, strict=True):
            acc = {}
            for name in agg.names:
                label = labels[name]
                missing = [e for e in chosen if label not in e.columns]
                if missing:
                    raise ValueError(f"stored aggregates hold no column {label!r} (they have "
                                     f"{sorted(missing[0].columns)}): the job's aggregates changed")
                acc[name] = np.concatenate([e.columns[label] for e in chosen])
            partials.append(acc)
        self.merge(slots, partials, replace=True)
        self._dirty.values[slots] = False
        if self._unemitted is not None:
            self._unemitted.values[slots] = False
