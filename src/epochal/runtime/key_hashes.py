"""64-bit hashes of key columns, as array operations: what `KeyIndex` picks its candidate cells by.

A string or binary value hashes to a polynomial over its bytes, computed for a whole array in one
pass with prefix sums; an integer to a bijective mix of its bits (MurmurHash3's finaliser). A
hash only picks a candidate: `KeyIndex` checks every candidate against the stored key.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from .wire.batches import binary_buffers

_U64 = np.uint64
_P = 0x9E3779B97F4A7C15 | 1  # odd, so invertible modulo 2**64
_P_INV = pow(_P, -1, 1 << 64)


class _Powers:
    """P**j and P**-j modulo 2**64, grown on demand: the polynomial hash needs both."""

    def __init__(self) -> None:
        self.up: np.ndarray = np.ones(1, dtype=_U64)
        self.down: np.ndarray = np.ones(1, dtype=_U64)

    def ensure(self, n: int) -> None:
        if len(self.up) >= n:
            return
        size = max(n, 2 * len(self.up))
        self.up = np.cumprod(np.full(size, _P, dtype=_U64)) * _U64(_P_INV)  # [P**0, P**1, ...]
        self.down = np.cumprod(np.full(size, _P_INV, dtype=_U64)) * _U64(_P)


_POWERS = _Powers()


def mix64(h: np.ndarray) -> np.ndarray:
    """MurmurHash3's 64-bit finaliser, in place: a bijection spreading every bit over the output."""
    h ^= h >> _U64(33)
    h *= _U64(0xFF51AFD7ED558CCD)
    h ^= h >> _U64(33)
    h *= _U64(0xC4CEB9FE1A85EC53)
    h ^= h >> _U64(33)
    return h


def binary_hashes(array: pa.Array) -> np.ndarray:
    """One hash per value of a (large) string or binary array, in one pass over its bytes.

    h(s) = mix(sum(s[j] * P**j) + len(s) * P): with prefix sums S over the whole data buffer,
    the value at [a, b) sums to (S[b] - S[a]) * P**-a, all wrapping modulo 2**64. Two values of
    one length and one polynomial differ in no byte; the length tells zero-padded values apart.
    """
    offsets, data = binary_buffers(array)
    lo, hi = int(offsets[0]), int(offsets[-1])
    data = data[lo:]
    _POWERS.ensure(hi - lo + 1)
    prefix = np.empty(hi - lo + 1, dtype=_U64)
    prefix[0] = 0
    terms = prefix[1:]
    np.multiply(data, _POWERS.up[: hi - lo], out=terms)
    np.cumsum(terms, out=terms)
    starts = offsets[:-1] - lo if lo else offsets[:-1]
    ends = offsets[1:] - lo if lo else offsets[1:]
    h = prefix[ends]
    h -= prefix[starts]
    h *= _POWERS.down[starts]
    lengths = (ends - starts).astype(_U64)
    lengths *= _U64(_P)
    h += lengths
    return mix64(h)
