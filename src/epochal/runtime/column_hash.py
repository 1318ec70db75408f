"""`keygroups.stable_hash` of a whole Arrow key column at once, with array operations.

Why it exists: a key's group must be the same whichever path computes it (the per-record path,
the columnar path, a restore, a rescale: dissertation §4.2), so columns hash exactly as
`stable_hash` does, CRC-32 of the key's canonical bytes then a 32-bit mix. One Python step per
key (about 0.6 µs) was most of what a batch of new keys cost the columnar count (issue 5); this
costs one pass of array operations per byte position instead, over the rows still that long.

Strings and integers are computed here; other types, rows longer than `_LONG` bytes (zlib is
quicker on them one by one) and nulls go through `stable_hash` itself.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..state.keygroups import stable_hash
from .wire.batches import binary_buffers

_U32 = np.uint32
# Rows longer than this take zlib, one call each: a byte position costs one array pass, so a
# single long key among short ones would otherwise cost a pass per byte for one row.
_LONG = 48
# `stable_hash` salts every non-string key's CRC with this constant (see `keygroups._encode`).
_NOT_STR = _U32(0x5BD1E995)


def _crc_table() -> np.ndarray:
    """The byte table of CRC-32 as zlib computes it (reflected, polynomial 0xEDB88320)."""
    table = np.arange(256, dtype=_U32)
    for _ in range(8):
        table = np.where(table & _U32(1), (table >> _U32(1)) ^ _U32(0xEDB88320), table >> _U32(1)).astype(_U32)
    return table


_TABLE = _crc_table()


def _crc_update(state: np.ndarray, data: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> None:
    """Feed row i's bytes `data[starts[i] : starts[i] + lengths[i]]` into `state[i]`, in place.

    Rows go longest first, so the rows still going at byte j are a prefix: each pass is one
    slice, no mask.
    """
    if not len(state):
        return
    order = np.argsort(-lengths, kind="stable")
    crc = state[order]
    pos = starts[order].astype(np.intp)
    remaining = -lengths[order]  # ascending
    for j in range(int(-remaining[0])):
        m = int(np.searchsorted(remaining, -j, side="left"))  # rows longer than j
        head = crc[:m]
        crc[:m] = _TABLE[(head ^ data[pos[:m] + j]) & _U32(0xFF)] ^ (head >> _U32(8))
    state[order] = crc


def _crc_byte(state: np.ndarray, byte: int) -> None:
    state[:] = _TABLE[(state ^ _U32(byte)) & _U32(0xFF)] ^ (state >> _U32(8))


def _fmix32(h: np.ndarray) -> np.ndarray:
    """MurmurHash3's 32-bit finaliser, as `stable_hash` applies it (uint32 wraps like `& 0xFFFFFFFF`)."""
    h ^= h >> _U32(16)
    h *= _U32(0x85EBCA6B)
    h ^= h >> _U32(13)
    h *= _U32(0xC2B2AE35)
    h ^= h >> _U32(16)
    return h


def supports(key_type: pa.DataType) -> bool:
    return (
        pa.types.is_string(key_type)
        or pa.types.is_large_string(key_type)
        or (pa.types.is_integer(key_type) and not pa.types.is_uint64(key_type))
    )


def stable_hashes(keys: pa.Array) -> np.ndarray:
    """`stable_hash` of every value of `keys` (strings or integers), as uint32."""
    if not supports(keys.type):
        raise TypeError(f"no vectorized stable hash for keys of type {keys.type}")
    is_string = not pa.types.is_integer(keys.type)
    # an integer hashes as the bytes b"i<decimal>;", exactly the decimal Arrow casts it to
    text = keys if is_string else pc.cast(keys, pa.large_string())
    offsets, data = binary_buffers(text)
    starts, lengths = offsets[:-1].astype(np.int64), np.diff(offsets).astype(np.int64)
    state = np.full(len(keys), 0xFFFFFFFF, dtype=_U32)
    if not is_string:
        _crc_byte(state, ord("i"))
    short = lengths <= _LONG
    if keys.null_count:
        short &= keys.is_valid().to_numpy(zero_copy_only=False)
    rows = np.flatnonzero(short)
    if len(rows) == len(state):
        _crc_update(state, data, starts, lengths)
    else:
        part = state[rows]
        _crc_update(part, data, starts[rows], lengths[rows])
        state[rows] = part
    if not is_string:
        _crc_byte(state, ord(";"))
    h = state ^ (_U32(0xFFFFFFFF) if is_string else _U32(0xFFFFFFFF) ^ _NOT_STR)
    h = _fmix32(h)
    others = np.flatnonzero(~short)
    if len(others):
        h[others] = [stable_hash(key) for key in keys.take(pa.array(others)).to_pylist()]
    return h


def key_groups(keys: pa.Array, max_parallelism: int) -> np.ndarray:
    """`keygroups.key_group_of` of every value of `keys`, as int64."""
    return (stable_hashes(keys) % _U32(max_parallelism)).astype(np.int64)
