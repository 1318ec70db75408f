"""The shape keyed state is snapshotted, written and restored in: key group → state → entries.

A key group is the unit of snapshot, restore and migration (dissertation §4.2), so every copy of
keyed state outside a backend is cut by key group first. A snapshot file is a sequence of
*sections*, one per key group: in a full file `{state: {key: value}}`, in a delta file
(ChronoStream §III-B, "asynchronous delta checkpointing") `{state: (upserts, deleted keys)}`.
A restore applies a full file, then its deltas in order (`apply_sections`).

A delta's section may also *replace* its key group (`ResetSection` when written, `Replacement`
when read): the group moved away (replaced by nothing) or moved here in a live migration
(replaced by the old owner's sections of it, copied as bytes: `SectionCopy`). That a new owner
copies the bytes it read instead of pickling the objects again is what keeps a large move off
its GIL (as ChronoStream §III-C, phase 1, rebuilds a moving slice from its checkpointed backup).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

# key group → state name → {key: value}: what a backend restores from and a full file holds
KeyedGroups = dict[int, dict[str, dict[Any, Any]]]


@dataclass(frozen=True, slots=True)
class SectionCopy:
    """One key group's section of another snapshot file, as its bytes (read, not decoded)."""

    is_delta: bool  # of a delta file, or of a full one
    data: bytes


@dataclass(frozen=True, slots=True)
class EncodedSection:
    """A section's entries already pickled, as the frames a file holds them in: what a snapshot
    serialised on the task's thread hands its writer (`runtime.task.snapshots`), so that it keeps no
    reference to the live maps while the writer checksums and writes."""

    frames: tuple[bytes, ...]


@dataclass(frozen=True, slots=True)
class ResetSection:
    """A delta's section that replaces its key group: by `copies` applied in order (a full
    section's entries, then deltas), then by `delta`, the changes since; by nothing when both
    are empty (the group moved away)."""

    copies: tuple[SectionCopy, ...] = ()
    delta: dict[str, tuple[dict[Any, Any], list[Any]]] | EncodedSection | None = None


@dataclass(frozen=True, slots=True)
class Replacement:
    """A delta's section, read: the key group's whole content from here on."""

    states: dict[str, dict[Any, Any]]


# `(key group, section)` pairs in ascending key group, as a snapshot hands them to its writer
Sections = Iterable[tuple[int, Any]]
# key group → the old owner's sections of it, in chain order: what a migration's new owner copies
GroupCopies = dict[int, tuple[SectionCopy, ...]]


def apply_sections(target: KeyedGroups, is_delta: bool, groups: dict[int, Any]) -> None:
    """Apply one file's sections (full or delta) to key group → state → {key: value}."""
    for key_group, states in groups.items():
        if isinstance(states, Replacement):
            target[key_group] = states.states
            continue
        into = target.setdefault(key_group, {})
        if not is_delta:
            for name, entries in states.items():
                into[name] = dict(entries)
            # a full file replaces what earlier files said about these key groups
            for name in [n for n in into if n not in states]:
                del into[name]
            continue
        for name, (upserts, deleted) in states.items():
            entries = into.setdefault(name, {})
            entries.update(upserts)
            for key in deleted:
                entries.pop(key, None)
