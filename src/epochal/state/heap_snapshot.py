"""The heap backend's snapshot: the frozen maps of one subtask, as its writer reads them.

Apart from `heap` because it is what crosses threads: the task fixes it (`HeapKeyedStateBackend.
snapshot`), the writer only reads it, and the task releases it (ABS §4; dissertation §4.5,
asynchronous snapshot invocation).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .incremental import ChangedKeys
from .keygroups import KeyGroups
from .manifest import FileHandle
from .sections import GroupCopies, KeyedGroups, ResetSection, Sections


@dataclass(eq=False, slots=True, weakref_slot=True)
class HeapSnapshot:
    """The fixed keyed state of one subtask: key group → state name → {key: value}.

    The inner dicts are shared with the live backend and are frozen there: treat them as
    read-only. Serialising them is the asynchronous part of the checkpoint, which only reads
    this object; `release` (on the task's thread) drops the maps once nothing reads them.

    `changed` is None for a snapshot to be written in full; otherwise it names, per key group
    and state, the keys that changed since the checkpoint whose file chain is `base`, and the
    snapshot is written as a delta over that chain; `resets` are key groups the delta replaces
    first (moved away, or moved here: `HeapKeyedStateBackend.reassign`).
    """

    key_groups: KeyGroups
    groups: KeyedGroups
    changed: ChangedKeys | None = None
    resets: GroupCopies = field(default_factory=dict)
    base: tuple[FileHandle, ...] = ()
    checkpoint_id: int | None = None
    released: bool = False
    entries: int = 0  # writing it pickles: all in its maps, or a delta's changed ones
    encoded: list[tuple[int, Any]] | None = None  # its sections, if pickled before the writer ran

    @property
    def is_delta(self) -> bool:
        return self.changed is not None

    def full_sections(self) -> Sections:
        """`(key group, {state: {key: value}})` in ascending key group, for a full file."""
        for key_group in sorted(self.groups):
            yield key_group, self.groups[key_group]

    def delta_sections(self) -> Sections:
        """`(key group, {state: (upserts, deleted keys)})` for the changed entries only; a
        `ResetSection` for a key group replaced since the base."""
        assert self.changed is not None
        for key_group in sorted(self.changed.keys() | self.resets.keys()):
            states = self.groups.get(key_group, {})
            section: dict[str, Any] = {}
            for name, keys in self.changed.get(key_group, {}).items():
                data = states.get(name, {})
                upserts = {k: data[k] for k in keys if k in data}
                section[name] = (upserts, [k for k in keys if k not in data])
            copies = self.resets.get(key_group)
            yield key_group, section if copies is None else ResetSection(copies, section)

    def release(self) -> None:
        """Nothing reads the frozen maps any more: drop them, so that old values only they hold
        are freed, and let the backend's batch loops write in place again (`released`).

        Called on the task's thread only: by `HeapKeyedStateBackend.on_snapshot_written`, or
        by a caller that serialised the snapshot early (`encoded`).
        """
        self.groups = {}
        self.resets = {}
        self.released = True
