"""The shape keyed state is snapshotted, written and restored in: key group → state → entries.

A key group is the unit of snapshot, restore and migration (dissertation §4.2), so every copy of
keyed state outside a backend is cut by key group first. A snapshot file is a sequence of
*sections*, one per key group: in a full file `{state: {key: value}}`, in a delta file
(ChronoStream §III-B, "asynchronous delta checkpointing") `{state: (upserts, deleted keys)}`.
A restore applies a full file, then its deltas in order (`apply_sections`).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

# key group → state name → {key: value}: what a backend restores from and a full file holds
KeyedGroups = dict[int, dict[str, dict[Any, Any]]]
# `(key group, section)` pairs in ascending key group, as a snapshot hands them to its writer
Sections = Iterable[tuple[int, dict[str, Any]]]


def apply_sections(target: KeyedGroups, is_delta: bool, groups: dict[int, Any]) -> None:
    """Apply one file's sections (full or delta) to key group → state → {key: value}."""
    for key_group, states in groups.items():
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
