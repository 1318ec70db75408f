"""Keys to key groups, and key groups to subtasks.

Keyed state is cut into a fixed number of key groups (the job's *max parallelism*), the unit of
snapshot, rescaling and migration (dissertation §4.2; ChronoStream's "slices", §III).
A key maps to a key group through a hash that is the same in every process and every run:
Python's `hash()` is salted per process, so it cannot be used. By default subtask `i` of `p` owns
the contiguous range `[ceil(i*m/p), ceil((i+1)*m/p))`, so a rescale moves whole ranges; a
`RoutingTable` says otherwise once key groups have moved between running subtasks (live
migration, ChronoStream §IV): then a subtask owns a `KeyGroupSet`.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..config import MAX_KEY_GROUPS as MAX_KEY_GROUPS

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


class KeyGroups(Protocol):
    """The key groups one subtask owns: a contiguous range, or any set after a migration."""

    def __contains__(self, key_group: object) -> bool: ...

    def __iter__(self) -> Iterator[int]: ...

    def __len__(self) -> int: ...


@dataclass(frozen=True, slots=True)
class KeyGroupSet:
    """Any set of key groups, ascending: what a subtask owns once groups have moved."""

    groups: tuple[int, ...]
    _members: frozenset[int] = field(default=frozenset(), compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "groups", tuple(sorted(set(self.groups))))
        object.__setattr__(self, "_members", frozenset(self.groups))

    def __contains__(self, key_group: object) -> bool:
        return key_group in self._members

    def __iter__(self) -> Iterator[int]:
        return iter(self.groups)

    def __len__(self) -> int:
        return len(self.groups)

    def __repr__(self) -> str:
        return f"KeyGroupSet({_ranges(self.groups)})"


def _ranges(groups: Iterable[int]) -> str:
    """`0-3,7,9-10`: a set of key groups, short."""
    parts: list[str] = []
    run: list[int] = []
    for g in sorted(groups):
        if run and g == run[-1] + 1:
            run.append(g)
            continue
        if run:
            parts.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
        run = [g]
    if run:
        parts.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
    return ",".join(parts)


def parse_key_groups(text: str) -> list[int]:
    """`0-3,7,9-10` (as `_ranges` writes a set, and as the command line takes one) as a list."""
    groups: list[int] = []
    for part in text.split(","):
        lo, dash, hi = part.strip().partition("-")
        if not lo.strip().isdigit() or (dash and not hi.strip().isdigit()):
            raise ValueError(f"{text!r} is not a list of key groups like 0-3,7")
        groups.extend(range(int(lo), int(hi) + 1) if dash else [int(lo)])
    return groups


def key_group_set(groups: Iterable[int]) -> KeyGroups:
    """`groups` as a `KeyGroupRange` when contiguous (the common case), else a `KeyGroupSet`."""
    ordered = sorted(set(groups))
    if ordered and ordered[-1] - ordered[0] + 1 == len(ordered):
        return KeyGroupRange(ordered[0], ordered[-1] + 1)
    if not ordered:
        return KeyGroupRange(0, 0)
    return KeyGroupSet(tuple(ordered))


@dataclass(frozen=True, slots=True)
class RoutingTable:
    """Which subtask owns each key group of a keyed vertex: `owners[key_group]`.

    Versioned: every change is made at a checkpoint barrier (`runtime.master.migrations`), and the
    checkpoint's manifest records the table that holds from it on, so a restore routes records
    exactly as the run it continues did. The default is the contiguous table.
    """

    owners: tuple[int, ...]
    parallelism: int
    version: int = 0

    @staticmethod
    def contiguous(parallelism: int, max_parallelism: int, subtasks: int | None = None) -> RoutingTable:
        """Ranges over the first `parallelism` of `subtasks` (default: as many); the others own
        nothing (standby subtasks, for a live rescale)."""
        owners = tuple(subtask_of_key_group(g, parallelism, max_parallelism) for g in range(max_parallelism))
        return RoutingTable(owners, subtasks or parallelism)

    @property
    def active(self) -> int:
        """Subtasks up to the last that owns a key group: the parallelism the job runs at."""
        return max(self.owners) + 1

    @property
    def max_parallelism(self) -> int:
        return len(self.owners)

    def key_groups_of(self, subtask: int) -> KeyGroups:
        return key_group_set(g for g, owner in enumerate(self.owners) if owner == subtask)

    def moved(self, moves: Mapping[int, int]) -> RoutingTable:
        """The next version, with `moves` (key group -> new owner) applied."""
        owners = list(self.owners)
        for group, subtask in moves.items():
            if not 0 <= group < len(owners):
                raise ValueError(f"key group {group} out of range [0, {len(owners)})")
            if not 0 <= subtask < self.parallelism:
                raise ValueError(f"subtask {subtask} out of range [0, {self.parallelism})")
            owners[group] = subtask
        return RoutingTable(tuple(owners), self.parallelism, self.version + 1)

    def changes(self, newer: RoutingTable) -> dict[int, tuple[int, int]]:
        """key group -> (old owner, new owner), for the groups `newer` moves."""
        return {g: (a, b) for g, (a, b) in enumerate(zip(self.owners, newer.owners)) if a != b}

    def describe(self) -> str:
        return "; ".join(f"{s}: {_ranges(self.key_groups_of(s))}" for s in range(self.parallelism))


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


def owned_key_group(key: Any, key_group: int | None, owned: KeyGroups, max_parallelism: int) -> int:
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
