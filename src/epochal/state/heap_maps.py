"""The heap backend's maps: one per state and key group, copied on write while a snapshot holds it.

Key groups are the unit of snapshot, restore, rescaling and migration (dissertation §4.2), so
the heap keeps one map per (state, key group): a snapshot fixes the state by freezing every map
and handing it over as is (O(key groups × states), dissertation §4.5: the synchronous part of
an asynchronous snapshot only fixes the state); the first write to a frozen map copies it, once
per key group per checkpoint. A migration drops and adds whole maps. Each map also records the
keys written since the last snapshot, the delta of an incremental checkpoint (`incremental.py`).
"""

from __future__ import annotations

from collections.abc import Container, Iterator
from typing import Any

from .incremental import ChangedKeys
from .keygroups import KeyGroups, owned_key_group
from .sections import KeyedGroups


class StateMap:
    """The entries of one state in one key group; frozen while a snapshot holds it.

    `stamps` says, per key, in which epoch (the backend's count of freezes) the key was last
    written: a key stamped with the current epoch is *owned*, i.e. its value was put or copied
    since the freeze and no snapshot shares it. The first write in an epoch also adds the key to
    `changed`, the delta of the next snapshot; `changed` is None in an epoch whose changes go
    unrecorded (`IncrementalTracker.tracks_changes`).

    Why stamps and not per-snapshot sets, probed per record: a set rebuilt from empty after a
    snapshot stores the key objects of the first records after it, not the ones `data` holds, so
    every later probe touches two objects per key. Measured: keyed operators 5-15 % slower for
    the rest of the run after the first checkpoint. `stamps` is never rebuilt (only copied), so
    it holds the very key objects `data` does; `changed` is added to once per key and epoch.
    """

    __slots__ = ("data", "frozen", "stamps", "changed")

    def __init__(self, tracked: bool = True) -> None:
        self.data: dict[Any, Any] = {}
        self.frozen = False
        self.stamps: dict[Any, int] = {}  # key -> epoch of its last write; only live keys
        # keys written or deleted since the last snapshot; None while changes go unrecorded
        self.changed: set[Any] | None = set() if tracked else None

    def writable(self, shared: bool = True) -> dict[Any, Any]:
        """`data`, safe to write: copied first if frozen and a snapshot may still read it."""
        if self.frozen:
            if shared:
                self.data = self.data.copy()  # keeps the key objects: see the class docstring
            self.frozen = False
        return self.data

    def mark(self, key: Any, epoch: int) -> None:
        """`key` was written: it is owned in `epoch`, and changed."""
        if self.stamps.get(key) != epoch:
            self.stamps[key] = epoch
            if self.changed is not None:
                self.changed.add(key)

    def freeze(self) -> dict[Any, Any]:
        self.frozen = True
        return self.data


class KeyGroupMaps:
    """Every state's maps of one subtask: per state, a list indexed by key group, None where
    the subtask owns none. `tracking`: whether the current epoch records changed keys.

    Only a record's lookup indexes the list; everything done per checkpoint (freezing, renewing
    the changed sets) walks the groups the subtask owns, not all of them: with 32,768 key groups
    a subtask of 256 owns 128, and a walk over every group per checkpoint was 32,768 steps.
    """

    def __init__(self, key_groups: KeyGroups, max_parallelism: int, tracking: bool) -> None:
        self.key_groups = key_groups
        self.max_parallelism = max_parallelism
        self.tracking = tracking
        self.states: dict[str, list[StateMap | None]] = {}
        self._owned = sorted(key_groups)

    def _new_maps(self) -> list[StateMap | None]:
        maps: list[StateMap | None] = [None] * self.max_parallelism
        tracking = self.tracking
        for g in self._owned:
            maps[g] = StateMap(tracking)
        return maps

    def of_state(self, name: str) -> list[StateMap | None]:
        """One state's maps, indexed by key group, None for groups not owned (made on first use)."""
        maps = self.states.get(name)
        if maps is None:
            maps = self.states[name] = self._new_maps()
        return maps

    def map(self, name: str, key_group: int) -> StateMap:
        """One state's map of one key group; a key group not owned is a routing bug, and raises."""
        # `of_state`, inlined: this runs for every state access of a record
        maps = self.states.get(name)
        if maps is None:
            maps = self.states[name] = self._new_maps()
        m = maps[key_group]
        if m is None:
            owned_key_group(None, key_group, self.key_groups, self.max_parallelism)  # raises
            raise AssertionError
        return m

    def keys(self, name: str) -> Iterator[tuple[int, Any]]:
        maps = self.states.get(name)
        if maps is None:
            return
        for key_group in self._owned:
            m = maps[key_group]
            if m is not None:
                for key in m.data:
                    yield key_group, key

    def freeze(self, with_changes: bool) -> tuple[KeyedGroups, ChangedKeys, int]:
        """Freeze every map: (the maps holding entries, per key group and state; with
        `with_changes`, the changed keys likewise; the number of entries)."""
        groups: KeyedGroups = {}
        changed: ChangedKeys = {}
        entries = 0
        owned = self._owned
        for name in sorted(self.states):  # a fixed order: snapshot bytes depend on content only
            maps = self.states[name]
            for key_group in owned:
                m = maps[key_group]
                if m is None:
                    continue
                entries += len(m.data)
                if m.data:
                    groups.setdefault(key_group, {})[name] = m.freeze()
                else:
                    m.freeze()
                if with_changes and m.changed:
                    changed.setdefault(key_group, {})[name] = m.changed
        return groups, changed, entries

    def renew_changes(self, tracking: bool) -> None:
        """A snapshot took the changed sets: record anew (or not at all) from here on."""
        self.tracking = tracking
        owned = self._owned
        for maps in self.states.values():
            for g in owned:
                m = maps[g]
                if m is None:
                    continue
                if not tracking:
                    m.changed = None
                elif m.changed is None or m.changed:  # an empty set is kept
                    m.changed = set()

    def load(self, groups: KeyedGroups) -> None:
        """Add entries of key groups (those not owned are skipped)."""
        for key_group, states in groups.items():
            if key_group not in self.key_groups:
                continue
            for name, entries in states.items():
                m = self.map(name, key_group)
                m.writable().update(entries)
                # stamp 0: neither owned nor changed, but `stamps` now holds `data`'s key objects
                m.stamps.update(dict.fromkeys(entries, 0))

    def reassign(self, owned: KeyGroups) -> tuple[list[int], list[dict[Any, Any]]]:
        """Own `owned` from now on: (the key groups dropped that held maps, the dicts of their
        maps, for the caller to free once no snapshot reads them); owned groups get empty maps."""
        before, self.key_groups, self._owned = self._owned, owned, sorted(owned)
        touched = sorted(set(before) | set(self._owned))
        dropped: list[int] = []
        departed: list[dict[Any, Any]] = []
        for maps in self.states.values():
            for g in touched:
                m = maps[g]
                if g not in owned:
                    if m is not None:
                        dropped.append(g)
                        departed.extend((m.data, m.stamps))
                    maps[g] = None
                elif m is None:
                    maps[g] = StateMap(self.tracking)
        return dropped, departed

    def adopt(self, gained: KeyedGroups, copied: Container[int]) -> None:
        """Take `gained`'s entries for owned key groups; their dicts become ours. Keys of a group
        not in `copied` are recorded as changed (no copy of its sections to reuse)."""
        for g, states in gained.items():
            if g not in self.key_groups:
                continue
            for name, entries in states.items():
                m = self.map(name, g)
                if not m.data and not m.frozen:
                    m.data = entries  # ours now: no copy of a large group
                else:
                    m.writable().update(entries)
                # stamp 0: neither owned nor changed, but `stamps` now holds `data`'s key objects
                m.stamps.update(dict.fromkeys(entries, 0))
                if g not in copied and m.changed is not None:
                    m.changed.update(entries)
