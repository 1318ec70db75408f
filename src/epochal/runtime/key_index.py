"""Arrow key columns → dense slots, found with array operations: the index of columnar operators.

Why it exists: a Python loop over a batch's distinct keys, even one dict lookup each, held the
columnar word count to a quarter of a plain pyarrow split-and-count (issue 5). `KeyIndex` keeps
an open-addressing hash table in numpy arrays, so a batch's distinct keys find their slots in a
few array passes. Keys never seen before get their key group (dissertation §4.2: every key
belongs to one of a fixed number of key groups) hashed as a column, or, a few at a time, in Python.

Hashes are 64-bit — a polynomial over the bytes of a string, a bijective mix of an integer —
and only pick a candidate: every candidate is checked against the stored key, so a collision
costs a detour through a small dict, never a wrong slot.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from . import column_hash
from .key_columns import BinaryKeys, GrowableArray, IntegerKeys, is_binary_like
from .key_hashes import binary_hashes, mix64
from .keys import key_groups_of_keys

_U64 = np.uint64
# Linear probing stays short while at most a quarter of the cells are taken (8 bytes a cell).
_MAX_LOAD = 0.25
_LOW = np.uint64(0xFFFFFFFF)
_NULL_HASH = np.uint64(0x2545F4914F6CDD1D)  # any value: a key that shares it only costs a regrouping
# A batch of partials carries its keys' `hash_keys` in this column (`uint64`), so the key
# exchange and the global phase use them instead of hashing the keys again.
KEY_HASH_COLUMN = "__epochal_key_hash"
# From this many new keys on, their key groups are hashed as a column (`column_hash`): below
# it, a Python step per key (memoised) is quicker than an array pass per byte position.
_VECTOR_GROUPS_MIN = 64


class KeyIndex:
    """Dense slots `0, 1, 2, …` for every distinct key seen in Arrow key columns of one type.

    Also keeps each slot's key (as Arrow, to check candidates) and key group (unless made with
    `key_groups=False`: then `key_groups` reads 0 for every slot). Supported key
    types: strings, binaries and integers (`supports`); other columns take the per-key path.
    Unbounded: it holds every key it has seen, like the keyed state it indexes.
    """

    def __init__(self, key_type: pa.DataType, max_parallelism: int, key_groups: bool = True) -> None:
        if not self.supports(key_type):
            raise TypeError(f"no columnar key index for keys of type {key_type}")
        self.key_type = self.normalised_type(key_type)
        self.max_parallelism = max_parallelism
        self._with_groups = key_groups  # False: slots only (a local aggregation never routes)
        self._keys = IntegerKeys() if pa.types.is_integer(self.key_type) else BinaryKeys(self.key_type)
        self._key_groups = GrowableArray(np.int64)
        self._cells = np.zeros(64, dtype=_U64)
        self._slot_hashes = GrowableArray(_U64)  # the full hash of every slot, to rehash on growth
        self._null_slot = -1
        self._overflow: dict[Any, int] = {}  # keys whose hash another key holds in the table

    @staticmethod
    def supports(key_type: pa.DataType) -> bool:
        # uint64 is left out: its upper half does not fit the int64 the index holds
        return is_binary_like(key_type) or (pa.types.is_integer(key_type) and not pa.types.is_uint64(key_type))

    @staticmethod
    def normalised_type(key_type: pa.DataType) -> pa.DataType:
        """The type keys are held as: one index serves every column of the same normalised type."""
        if pa.types.is_integer(key_type):
            return pa.int64()
        if pa.types.is_string(key_type) or pa.types.is_large_string(key_type):
            return pa.large_string()
        if pa.types.is_binary(key_type) or pa.types.is_large_binary(key_type):
            return pa.large_binary()
        return key_type

    def accepts(self, key_type: pa.DataType) -> bool:
        """Whether keys of `key_type` are the keys of this index (same normalised type)."""
        return bool(self.normalised_type(key_type) == self.key_type)

    def __len__(self) -> int:
        return len(self._key_groups)

    @property
    def key_groups(self) -> np.ndarray:
        """The key group of every slot (a view: valid until keys are added)."""
        return self._key_groups.values

    def keys_at(self, slots: np.ndarray) -> pa.Array:
        """The keys of `slots`, as Arrow of the index's type."""
        keys = self._keys.array().take(pa.array(slots, pa.int64()))
        if self._null_slot >= 0:
            is_null = slots == self._null_slot
            if is_null.any():
                keys = pc.if_else(pa.array(is_null), pa.nulls(len(keys), self.key_type), keys)
        return keys

    # -- lookup --------------------------------------------------------------------------------
    def lookup(self, keys: pa.Array, hashes: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Slots of `keys` (distinct values, e.g. a dictionary), adding the unseen ones.

        `hashes`: the keys' `hash_keys`, computed upstream (a local aggregation ships them with
        its partials), so a key is hashed once on its way. Returns `(slots, added)`: `added`
        masks the keys that got a slot just now.
        """
        keys = self._normalise(keys)
        hashes = self._hashes(keys) if hashes is None else hashes
        if keys.null_count:
            valid = keys.is_valid().to_numpy(zero_copy_only=False)
            slots = np.full(len(keys), -1, dtype=np.int64)
            slots[valid] = self._probe(hashes[valid])
        else:
            valid = None
            slots = self._probe(hashes)
        self._verify(keys, slots)
        added = np.zeros(len(keys), dtype=bool)
        missing = slots < 0 if valid is None else valid & (slots < 0)
        if missing.any():
            self._resolve_missing(keys, hashes, np.flatnonzero(missing), slots, added)
        if valid is not None and not valid.all():
            if self._null_slot < 0:
                self._null_slot = int(self._append(keys.filter(~valid), np.zeros(1, dtype=_U64))[0])
                added[~valid] = True
            slots[~valid] = self._null_slot
        return slots, added

    def lookup_existing(self, keys: pa.Array) -> np.ndarray:
        """Slots of `keys`, -1 for keys not in the index (which stays as it is)."""
        keys = self._normalise(keys)
        slots = np.full(len(keys), -1, dtype=np.int64)
        valid = keys.is_valid().to_numpy(zero_copy_only=False) if keys.null_count else np.ones(len(keys), bool)
        slots[valid] = self._probe(self._hashes(keys)[valid])
        self._verify(keys, slots)
        for i in np.flatnonzero(valid & (slots < 0)).tolist():
            slots[i] = self._overflow.get(keys[i].as_py(), -1)
        if self._null_slot >= 0:
            slots[~valid] = self._null_slot
        return slots

    def _verify(self, keys: pa.Array, slots: np.ndarray) -> None:
        """Unset the slots whose stored key differs: a hash match is only a candidate."""
        rows = np.flatnonzero(slots >= 0)
        if len(rows) == len(slots):  # the usual case: compare whole arrays, no gather of keys
            same = pc.equal(self.keys_at(slots), keys)
        elif len(rows):
            same = pc.equal(self.keys_at(slots[rows]), keys.take(pa.array(rows)))
        else:
            return
        if same.false_count:
            slots[rows[~same.to_numpy(zero_copy_only=False)]] = -1

    def _normalise(self, keys: pa.Array) -> pa.Array:
        if isinstance(keys, pa.ChunkedArray):
            keys = keys.combine_chunks()
        if keys.type != self.key_type:
            keys = keys.cast(self.key_type)
        return keys

    def _hashes(self, keys: pa.Array) -> np.ndarray:
        return hash_keys(keys)

    def _resolve_missing(
        self, keys: pa.Array, hashes: np.ndarray, missing: np.ndarray, slots: np.ndarray, added: np.ndarray
    ) -> None:
        """Keys the table did not hold: true collisions live in `_overflow`, the rest are new."""
        if self._overflow:
            py_keys = keys.take(pa.array(missing)).to_pylist()
            for i, key in zip(missing.tolist(), py_keys, strict=False):
                slots[i] = self._overflow.get(key, -1)
            missing = missing[slots[missing] < 0]
            if not len(missing):
                return
        new_slots = self._append(keys.take(pa.array(missing)), hashes[missing])
        slots[missing] = new_slots
        added[missing] = True
        if len(self) > _MAX_LOAD * len(self._cells):
            self._grow()
        placed = self._insert(hashes[missing], new_slots)
        if not placed.all():  # their hash is taken (by an older key, or one added just now)
            for i in missing[~placed].tolist():
                self._overflow[keys[i].as_py()] = int(slots[i])

    # -- the hash table ------------------------------------------------------------------------
    # One uint64 per cell: the hash's upper 32 bits (a tag) and slot + 1 (0: empty). A probe is
    # one gather from a table half the size of separate hash and slot arrays: at scale a lookup
    # is bound by cache misses, not arithmetic. Equal tags are only candidates, like equal hashes.
    def _probe(self, hashes: np.ndarray) -> np.ndarray:
        """The slot in the cell that holds each hash, or -1: linear probing, all rows at once."""
        mask = len(self._cells) - 1
        pos = (hashes & _U64(mask)).astype(np.intp)
        tags = hashes >> _U64(32)
        cells = self._cells[pos]
        # a sparse table: most rows end at their first cell, with a hit or an empty one
        occupied = cells != 0
        hit = occupied & ((cells >> _U64(32)) == tags)
        out = np.where(hit, (cells & _LOW).astype(np.int64) - 1, -1)
        todo = np.flatnonzero(occupied & ~hit)
        while len(todo):
            p = pos[todo] = (pos[todo] + 1) & mask
            cells = self._cells[p]
            occupied = cells != 0
            hit = occupied & ((cells >> _U64(32)) == tags[todo])
            out[todo[hit]] = (cells[hit] & _LOW).astype(np.int64) - 1
            todo = todo[occupied & ~hit]
        return out

    def _insert(self, hashes: np.ndarray, slots: np.ndarray) -> np.ndarray:
        """Place new hashes; returns which were placed (False: the tag is in its chain already)."""
        if len(hashes) <= 32:  # the usual batch brings a few new keys: a plain loop is quicker
            return self._insert_few(hashes, slots)
        mask = len(self._cells) - 1
        placed = np.zeros(len(hashes), dtype=bool)
        pos = (hashes & _U64(mask)).astype(np.intp)
        tags = hashes >> _U64(32)
        values = (tags << _U64(32)) | (slots.astype(_U64) + _U64(1))
        todo = np.arange(len(hashes))
        while len(todo):
            p = pos[todo]
            cells = self._cells[p]
            empty = cells == 0
            # a cell holding the same tag: this key collides, it goes to the overflow dict
            taken = ~empty & ((cells >> _U64(32)) == tags[todo])
            claim, free = todo[empty], p[empty]
            # rows claiming one cell: the last write wins (values are distinct: slots are), the
            # others read back another value and probe the same cell again, as occupied now
            self._cells[free] = values[claim]
            won = self._cells[free] == values[claim]
            placed[claim[won]] = True
            moving = todo[~empty & ~taken]
            pos[moving] = (pos[moving] + 1) & mask
            todo = np.concatenate((moving, claim[~won]))
        return placed

    def _insert_few(self, hashes: np.ndarray, slots: np.ndarray) -> np.ndarray:
        cells = self._cells
        mask = len(cells) - 1
        placed = np.zeros(len(hashes), dtype=bool)
        for i, (h, slot) in enumerate(zip(hashes.tolist(), slots.tolist(), strict=False)):
            pos, tag = h & mask, h >> 32
            while cell := int(cells[pos]):
                if cell >> 32 == tag:
                    break
                pos = (pos + 1) & mask
            else:
                cells[pos] = (tag << 32) | (slot + 1)
                placed[i] = True
        return placed

    def _grow(self) -> None:
        capacity = len(self._cells)
        while _MAX_LOAD * capacity < len(self):
            capacity *= 2
        old = self._cells[self._cells != 0]
        self._cells = np.zeros(capacity, dtype=_U64)
        # a cell keeps only the tag: the rest of the hash comes from the slot's stored hash
        slots = (old & _LOW).astype(np.int64) - 1
        placed = self._insert(self._slot_hashes.values[slots], slots)
        # keys whose tags never met in the old chains may meet in the new ones
        for slot, key in zip(slots[~placed].tolist(), self.keys_at(slots[~placed]).to_pylist(), strict=False):
            self._overflow[key] = slot

    # -- slot storage --------------------------------------------------------------------------
    def _append(self, keys: pa.Array, hashes: np.ndarray) -> np.ndarray:
        """New slots for `keys`, with their key groups."""
        first = len(self)
        self._slot_hashes.extend(hashes)
        if not self._with_groups:
            groups = np.zeros(len(keys), dtype=np.int64)
        elif len(keys) >= _VECTOR_GROUPS_MIN and column_hash.supports(keys.type):
            groups = column_hash.key_groups(keys, self.max_parallelism)
        else:
            groups = np.asarray(key_groups_of_keys(keys.to_pylist(), self.max_parallelism), dtype=np.int64)
        self._key_groups.extend(groups)
        self._keys.append(keys)
        return np.arange(first, len(self), dtype=np.int64)


def carried_hashes(batch: pa.RecordBatch) -> np.ndarray | None:
    """The keys' hashes a local aggregation shipped with its partials (`KEY_HASH_COLUMN`), when
    the batch's keys are distinct: a batch the input joined from several shipments may repeat a
    key, and then None (its keys are grouped and hashed as any batch's)."""
    if KEY_HASH_COLUMN not in batch.schema.names:
        return None
    hashes = batch.column(KEY_HASH_COLUMN).to_numpy(zero_copy_only=False)
    return hashes if distinct_hashes(hashes) else None


def distinct_hashes(hashes: np.ndarray) -> bool:
    """Whether no two of `hashes` are equal (then no two of their keys are): one sort of
    integers, about 11 ns a key, where grouping the keys again costs about 90."""
    if len(hashes) < 2:
        return True
    ordered = np.sort(hashes)
    return not bool((ordered[1:] == ordered[:-1]).any())


def hash_keys(keys: pa.Array) -> np.ndarray:
    """The 64-bit hash `KeyIndex` files each key under (a null's is never read): what a
    local aggregation computes once and ships, so neither the router nor the global phase
    hashes the key again."""
    if isinstance(keys, pa.ChunkedArray):
        keys = keys.combine_chunks()
    if pa.types.is_integer(keys.type):
        values = keys.cast(pa.int64()).fill_null(0).to_numpy(zero_copy_only=False)
        hashes = mix64(values.view(_U64).copy())
    else:
        hashes = binary_hashes(keys)
    if keys.null_count:  # not the hash of 0 or of "": a null is a key of its own in a batch of partials
        hashes[~keys.is_valid().to_numpy(zero_copy_only=False)] = _NULL_HASH
    return hashes
