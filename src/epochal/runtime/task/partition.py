"""Routing a task's output batches to the channels of one outgoing edge.

Forward keeps a subtask's records on the matching downstream subtask; rebalance sends whole
batches round robin; broadcast sends every batch everywhere; key-group routing sends each record
to the subtask that owns its key group (dissertation §4.2, key groups), vectorized on Arrow; which
subtask owns which key group is a routing table that a live migration changes (`runtime.master.migrations`).
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from ...plan.specs import Partitioning, PartitionKind
from ..key_index import KeyIndex, carried_hashes
from ..keys import encode_key_column, key_column, key_groups_of_column, key_groups_of_records, record_key_fn
from ..wire.batches import batch_len, to_records
from ..wire.elements import Batch

# A partitioner's key index only routes; past this many keys it starts afresh (bounded memory).
_INDEX_LIMIT = 1 << 20


@functools.lru_cache(maxsize=64)
def _owner_table(owners: tuple[int, ...]) -> tuple[np.ndarray, list[int]]:
    """Key group → channel, as an array (vectorized routing) and a list (per record), shared
    by every partitioner that routes by the same table: at 32,768 key groups and 256 subtasks a
    table per partitioner would be 256 copies of it (key groups: `state.keygroups`)."""
    array = np.array(owners, dtype=np.int64)
    array.flags.writeable = False
    return array, list(owners)


@functools.lru_cache(maxsize=64)
def _contiguous(num_channels: int, max_parallelism: int) -> tuple[int, ...]:
    return tuple((kg * num_channels) // max_parallelism for kg in range(max_parallelism))


class Partitioner:
    """Splits a batch into `(channel index, batch)` pieces for one edge."""

    def __init__(
        self,
        partitioning: Partitioning,
        num_channels: int,
        subtask: int,
        max_parallelism: int,
        target_name: str,
        owners: Sequence[int] | None = None,
    ) -> None:
        self.kind = partitioning.kind
        self.num_channels = num_channels
        self.max_parallelism = max_parallelism
        self.target_name = target_name
        self._next = subtask % num_channels
        self._key = partitioning.key
        self._column = key_column(partitioning.key) if partitioning.key is not None else None
        self._key_fn = record_key_fn(partitioning.key) if partitioning.key is not None else None
        self._index: KeyIndex | None = None
        # key group → channel: contiguous ranges (the inverse of key_group_range), or a routing table
        self.reroute(owners or _contiguous(num_channels, max_parallelism))

    def reroute(self, owners: Sequence[int]) -> None:
        """Route key groups to `owners[key_group]` from the next batch on (a live migration
        switches at a barrier: `runtime.master.migrations`)."""
        # for per-record routing the list: list indexing beats numpy scalars; never changed in place
        self._owner, self._owner_list = _owner_table(tuple(owners))

    def split(self, batch: Batch) -> Iterator[tuple[int, Batch]]:
        if batch_len(batch) == 0:
            return
        kind = self.kind
        if kind is PartitionKind.FORWARD or self.num_channels == 1:
            yield 0, batch
        elif kind is PartitionKind.REBALANCE:
            target = self._next
            self._next = (target + 1) % self.num_channels
            yield target, batch
        elif kind is PartitionKind.BROADCAST:
            for target in range(self.num_channels):
                yield target, batch
        elif isinstance(batch, pa.RecordBatch) and self._column is not None:
            yield from self._split_arrow(batch)
        else:
            yield from self._split_records(to_records(batch))

    def _split_records(self, records: list[Any]) -> Iterator[tuple[int, Batch]]:
        assert self._key_fn is not None
        _, groups = key_groups_of_records(records, self._key_fn, self.max_parallelism, self.target_name)
        buckets: list[list[Any]] = [[] for _ in range(self.num_channels)]
        appends = [bucket.append for bucket in buckets]
        for record, target in zip(records, map(self._owner_list.__getitem__, groups)):
            appends[target](record)
        for target, bucket in enumerate(buckets):
            if bucket:
                yield target, bucket

    def _arrow_key_groups(self, batch: pa.RecordBatch) -> np.ndarray:
        """The key group of each row, from a `KeyIndex` if it can (by the keys' hashes when a
        local aggregation shipped them: then nothing here hashes a key)."""
        assert self._column is not None
        hashes = carried_hashes(batch)
        if hashes is not None:  # a local phase's partials: distinct keys, hashed already
            distinct, indices = batch.column(self._column), None
        else:
            distinct, indices = encode_key_column(batch, self._column, self.target_name)
        if KeyIndex.supports(distinct.type):
            index = self._index
            if index is None or not index.accepts(distinct.type) or len(index) > _INDEX_LIMIT:
                index = self._index = KeyIndex(distinct.type, self.max_parallelism)
            slots, _ = index.lookup(distinct, hashes)
            groups = index.key_groups[slots]
            return groups if indices is None else groups[indices]
        assert indices is not None
        return key_groups_of_column(distinct, self._column, self.max_parallelism, self.target_name)[indices]

    def _split_arrow(self, batch: pa.RecordBatch) -> Iterator[tuple[int, Batch]]:
        groups = self._arrow_key_groups(batch)
        targets = self._owner[groups].astype(np.int16)  # 16-bit: numpy radix-sorts it
        order = np.argsort(targets, kind="stable")
        sorted_targets = targets[order]
        bounds = np.searchsorted(sorted_targets, np.arange(self.num_channels + 1))
        if sorted_targets[0] == sorted_targets[-1]:  # one target: the batch as it is
            yield int(sorted_targets[0]), batch
            return
        ordered = batch.take(pa.Array.from_buffers(pa.int64(), len(order), [None, pa.py_buffer(order)]))
        for target in range(self.num_channels):  # one take, then a zero-copy slice per target
            lo, hi = int(bounds[target]), int(bounds[target + 1])
            if hi > lo:
                yield target, ordered.slice(lo, hi - lo)

