"""Counter-based random numbers: every draw is a hash of (seed, event id, field).

A stream generator (Java's `Random` seeded per event, as Beam does, or numpy's sequential
generators) would have to be stepped through the events before a position to resume there,
and could not be vectorized over ids that are not consecutive (an interleaved split, a shuffled
group). Hashing the counter instead makes any draw a pure function of its coordinates: a reader
generates any set of ids directly, in one vectorized pass, and gets the same values as any
other reader of the same ids. The hash is the output function of SplitMix64 (Steele, Lea and Flood, "Fast splittable
pseudorandom number generators", OOPSLA 2014; Java's `SplittableRandom`): a per-event state is
hashed from (key, id), and field `f` is the generator's `f`-th output from that state.
"""

from __future__ import annotations

import numpy as np

_MASK64 = (1 << 64) - 1
_GOLDEN = 0x9E3779B97F4A7C15
_M1 = 0xBF58476D1CE4E5B9
_M2 = 0x94D049BB133111EB


def _mix_int(z: int) -> int:
    z &= _MASK64
    z = ((z ^ (z >> 30)) * _M1) & _MASK64
    z = ((z ^ (z >> 27)) * _M2) & _MASK64
    return z ^ (z >> 31)


def _mix(z: np.ndarray) -> np.ndarray:
    """SplitMix64's finalizer over a uint64 array, in place (numpy's uint64 products wrap)."""
    z ^= z >> np.uint64(30)
    z *= np.uint64(_M1)
    z ^= z >> np.uint64(27)
    z *= np.uint64(_M2)
    z ^= z >> np.uint64(31)
    return z


def stream_key(seed: int, stream: int) -> int:
    """A 64-bit key for one use of the seed (events, shuffles, text pools): independent streams."""
    return _mix_int(_mix_int(seed) + (stream + 1) * _GOLDEN)


class EventDraws:
    """The draws of a set of events: `draw(field)` is one uint64 per event, a pure function of
    (key, event id, field)."""

    __slots__ = ("_state",)

    def __init__(self, key: int, ids: np.ndarray) -> None:
        state = ids.astype(np.uint64)
        state *= np.uint64(_GOLDEN)
        state ^= np.uint64(key)
        self._state = _mix(state)

    def draw(self, field: int) -> np.ndarray:
        """Field `field`'s uint64 draw for every event."""
        return _mix(self._state + np.uint64(((field + 1) * _GOLDEN) & _MASK64))


def high(u: np.ndarray) -> np.ndarray:
    """The upper 32 bits of each draw (one independent 32-bit draw)."""
    return u >> np.uint64(32)


def low(u: np.ndarray) -> np.ndarray:
    """The lower 32 bits of each draw (another independent 32-bit draw)."""
    return u & np.uint64(0xFFFFFFFF)


def below(u32: np.ndarray, n: int | np.ndarray) -> np.ndarray:
    """Uniform ints in [0, n) from 32-bit draws (Lemire's multiply-shift), as int64.

    The bias is at most n / 2**32, far below what the generator's statistics could show.
    """
    return ((u32 * np.asarray(n, dtype=np.uint64)) >> np.uint64(32)).astype(np.int64)


def unit(u: np.ndarray) -> np.ndarray:
    """Uniform doubles in [0, 1) from 64-bit draws (their upper 53 bits)."""
    return (u >> np.uint64(11)).astype(np.float64) * (1.0 / (1 << 53))
