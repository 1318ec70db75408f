"""Keys to key groups, and key groups to subtasks.

Keyed state is cut into a fixed number of key groups (the job's *max parallelism*), the unit of
snapshot, rescaling and, later, migration (dissertation §4.2, L3269–3303; ChronoStream's "slices").
A key maps to a key group through a hash that is the same in every process and every run:
Python's `hash()` is salted per process, so it cannot be used. Subtask `i` of `p` owns the
contiguous range `[ceil(i*m/p), ceil((i+1)*m/p))`, so a rescale moves whole ranges.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass
from typing import Any

DEFAULT_MAX_PARALLELISM = 128


class UnhashableKeyError(TypeError):
    """A key that has no stable hash (e.g. a list, a set, or an arbitrary object)."""


def _encode(key: Any, out: list[bytes]) -> None:
    # Type-tagged, length-prefixed canonical bytes. Values that Python treats as equal dict keys
    # (1, 1.0, True) must encode alike, or one key's state would split across key groups.
    if isinstance(key, str):
        data = str.encode(key, "utf-8", "surrogatepass")
        out.append(b"s%d:" % len(data))
        out.append(data)
    elif isinstance(key, (bool, int)):
        out.append(b"i%d;" % int(key))
    elif isinstance(key, float):
        if key.is_integer():
            out.append(b"i%d;" % int(key))
        else:
            out.append(b"f" + struct.pack("<d", key))
    elif isinstance(key, bytes):
        out.append(b"b%d:" % len(key))
        out.append(key)
    elif key is None:
        out.append(b"n")
    elif isinstance(key, tuple):
        out.append(b"t%d(" % len(key))
        for item in key:
            _encode(item, out)
    else:
        raise UnhashableKeyError(
            f"key {key!r} of type {type(key).__name__} has no stable hash; "
            "use str, int, float, bytes, None or a tuple of these"
        )


def stable_hash(key: Any) -> int:
    """A 32-bit hash of `key` that is identical in every process and run."""
    if isinstance(key, str):  # the hot path (str subclasses hash as the equal str)
        h = zlib.crc32(str.encode(key, "utf-8", "surrogatepass"))
    else:
        parts: list[bytes] = []
        _encode(key, parts)
        h = zlib.crc32(b"".join(parts)) ^ 0x5BD1E995
    # murmur3 fmix32: crc32's low bits are too regular to take a modulus of directly.
    h ^= h >> 16
    h = (h * 0x85EBCA6B) & 0xFFFFFFFF
    h ^= h >> 13
    h = (h * 0xC2B2AE35) & 0xFFFFFFFF
    h ^= h >> 16
    return h


def key_group_of(key: Any, max_parallelism: int = DEFAULT_MAX_PARALLELISM) -> int:
    """The key group of `key`, in `[0, max_parallelism)`."""
    return stable_hash(key) % max_parallelism


@dataclass(frozen=True, slots=True)
class KeyGroupRange:
    """A contiguous, half-open range of key groups `[start, end)` owned by one subtask."""

    start: int
    end: int

    def __contains__(self, key_group: object) -> bool:
        return isinstance(key_group, int) and self.start <= key_group < self.end

    def __iter__(self):  # type: ignore[no-untyped-def]
        return iter(range(self.start, self.end))

    def __len__(self) -> int:
        return self.end - self.start

    def intersects(self, other: KeyGroupRange) -> bool:
        return self.start < other.end and other.start < self.end


def key_group_range(subtask: int, parallelism: int, max_parallelism: int) -> KeyGroupRange:
    """The key groups subtask `subtask` of `parallelism` owns."""
    if not 0 < parallelism <= max_parallelism:
        raise ValueError(f"parallelism {parallelism} must be in [1, {max_parallelism}]")
    if not 0 <= subtask < parallelism:
        raise ValueError(f"subtask {subtask} out of range for parallelism {parallelism}")
    # Ceiling division, so that `subtask_of_key_group` (a floor) is the exact inverse.
    return KeyGroupRange(
        -(-subtask * max_parallelism // parallelism),
        -(-(subtask + 1) * max_parallelism // parallelism),
    )


def subtask_of_key_group(key_group: int, parallelism: int, max_parallelism: int) -> int:
    """The subtask that owns `key_group`: the inverse of `key_group_range`."""
    return (key_group * parallelism) // max_parallelism


def encode_key(key: Any) -> bytes:
    """The canonical bytes of `key`: equal dict keys (`1`, `1.0`, `True`) encode alike."""
    parts: list[bytes] = []
    _encode(key, parts)
    return b"".join(parts)


def owned_key_group(key: Any, key_group: int | None, owned: KeyGroupRange, max_parallelism: int) -> int:
    """The key group of `key` (computed if not given), checked to be one of `owned`.

    A key outside a subtask's range means records were routed to the wrong subtask: a bug,
    never something to store silently.
    """
    if key_group is None:
        key_group = key_group_of(key, max_parallelism)
    if key_group not in owned:
        raise RuntimeError(
            f"key {key!r} (key group {key_group}) is not owned by this subtask "
            f"({owned}): records were routed to the wrong subtask"
        )
    return key_group
