"""Keyed state held in memory, cut into key groups, snapshotted copy-on-write.

A snapshot must not stop the stream (ABS §4; dissertation §4.5, "asynchronous invocation",
L3513–3534): the synchronous part only *fixes* the state, and serialising it happens elsewhere.
Here fixing is O(key groups × states): every per-key-group map is marked frozen and handed to the
snapshot as is. The first write to a frozen map after that copies the map (once per key group
per checkpoint), and the first in-place access to a mutable value copies that value, so the
snapshot never sees a later write.

Deviation: the copy granularity is the key group, not the entry (Flink's CopyOnWriteStateMap is
per entry); incremental, per-entry checkpoints are the next step (ChronoStream §III-B).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any, Callable, Iterator

from .keygroups import KeyGroupRange, key_group_of

_ABSENT = object()

# Values of these types can be shared with a snapshot: nothing can change them in place.
_IMMUTABLE = (int, float, str, bytes, bool, type(None), complex, frozenset)


def _is_immutable(value: Any) -> bool:
    if isinstance(value, _IMMUTABLE) or type(value) is object:  # bare objects: sentinels
        return True
    if type(value) is tuple:
        return all(_is_immutable(v) for v in value)
    return False


class _StateMap:
    """The entries of one state in one key group; frozen while a snapshot holds it."""

    __slots__ = ("data", "frozen", "owned")

    def __init__(self, data: dict[Any, Any] | None = None) -> None:
        self.data: dict[Any, Any] = {} if data is None else data
        self.frozen = False
        self.owned: set[Any] = set()  # keys whose mutable value was copied since the last freeze

    def writable(self) -> dict[Any, Any]:
        if self.frozen:
            self.data = dict(self.data)
            self.frozen = False
            self.owned = set()
        return self.data

    def freeze(self) -> dict[Any, Any]:
        self.frozen = True
        self.owned = set()
        return self.data


@dataclass(frozen=True, slots=True)
class KeyedStateSnapshot:
    """The fixed keyed state of one subtask: key group → state name → {key: value}.

    The inner dicts are shared with the live backend and are frozen there: treat them as
    read-only. Serialising them is the asynchronous part of the checkpoint.
    """

    key_groups: KeyGroupRange
    groups: dict[int, dict[str, dict[Any, Any]]]

    def entry_count(self) -> int:
        return sum(len(m) for states in self.groups.values() for m in states.values())


class HeapKeyedStateBackend:
    """In-memory keyed state of one subtask: the key groups of its `KeyGroupRange`.

    The operator sets the current key before user code runs; state handles then read and write
    the current key's entry. Keys outside the range are a routing bug, and raise.
    """

    def __init__(self, key_groups: KeyGroupRange, max_parallelism: int) -> None:
        self.key_groups = key_groups
        self.max_parallelism = max_parallelism
        self._maps: dict[str, list[_StateMap]] = {}
        self.current_key: Any = None
        self.current_key_group = -1

    # -- current key ---------------------------------------------------------------------------
    def set_current_key(self, key: Any, key_group: int | None = None) -> None:
        if key_group is None:
            key_group = key_group_of(key, self.max_parallelism)
        if key_group not in self.key_groups:
            raise RuntimeError(
                f"key {key!r} (key group {key_group}) is not owned by this subtask "
                f"({self.key_groups}): records were routed to the wrong subtask"
            )
        self.current_key = key
        self.current_key_group = key_group

    # -- entries of the current key ------------------------------------------------------------
    def _map(self, name: str, key_group: int) -> _StateMap:
        maps = self._maps.get(name)
        if maps is None:
            maps = self._maps[name] = [_StateMap() for _ in self.key_groups]
        return maps[key_group - self.key_groups.start]

    def get(self, name: str, default: Any = None) -> Any:
        return self._map(name, self.current_key_group).data.get(self.current_key, default)

    def get_mutable(self, name: str, factory: Callable[[], Any]) -> Any:
        """The current key's value, safe to change in place (copied once if a snapshot shares it)."""
        m = self._map(name, self.current_key_group)
        key = self.current_key
        data = m.writable()
        value = data.get(key, _ABSENT)
        if value is _ABSENT:
            value = data[key] = factory()
            m.owned.add(key)
        elif key not in m.owned:
            if not _is_immutable(value):
                value = data[key] = copy.deepcopy(value)
            m.owned.add(key)
        return value

    def get_for_read(self, name: str, default: Any = None) -> Any:
        """The current key's value for a caller that may change it in place (ValueState).

        A missing value reads as a private copy of a mutable `default`, never the shared object.
        """
        m = self._map(name, self.current_key_group)
        value = m.data.get(self.current_key, _ABSENT)
        if value is _ABSENT:
            return default if _is_immutable(default) else copy.deepcopy(default)
        if _is_immutable(value) or self.current_key in m.owned:
            return value
        return self.get_mutable(name, dict)

    def put(self, name: str, value: Any) -> None:
        m = self._map(name, self.current_key_group)
        m.writable()[self.current_key] = value
        m.owned.add(self.current_key)

    def delete(self, name: str) -> None:
        m = self._map(name, self.current_key_group)
        if self.current_key in m.data:
            del m.writable()[self.current_key]

    # -- whole-key-group access, for operators and snapshots ------------------------------------
    def raw_map(self, name: str, key_group: int) -> dict[Any, Any]:
        """A writable map of one key group, for vectorized operators that batch their updates."""
        return self._map(name, key_group).writable()

    def keys(self, name: str) -> Iterator[tuple[int, Any]]:
        for offset, m in enumerate(self._maps.get(name, ())):
            for key in m.data:
                yield self.key_groups.start + offset, key

    def snapshot(self) -> KeyedStateSnapshot:
        """Fix the current state (synchronous, cheap); serialise the result elsewhere."""
        groups: dict[int, dict[str, dict[Any, Any]]] = {}
        for name in sorted(self._maps):  # a fixed order: snapshot bytes depend on content only
            for offset, m in enumerate(self._maps[name]):
                if m.data:
                    groups.setdefault(self.key_groups.start + offset, {})[name] = m.freeze()
        return KeyedStateSnapshot(self.key_groups, groups)

    def restore(self, groups: dict[int, dict[str, dict[Any, Any]]]) -> None:
        """Load key groups (any superset of ours is fine: foreign key groups are skipped)."""
        for key_group, states in groups.items():
            if key_group not in self.key_groups:
                continue
            for name, entries in states.items():
                m = self._map(name, key_group)
                m.writable().update(entries)
