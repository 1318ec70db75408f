"""Expired entries leave a keyed-state backend: incrementally, and out of snapshots (`ttl`).

`TtlStates` is what an operator keeps of the TTL states its function registered: it runs the
incremental cleanup after each batch (a cursor that walks each TTL state's keys, one key group at
a time, and deletes what expired: Flink's incremental cleanup, `incremental_cleanup` entries per
record), and wraps the operator's keyed snapshot so that the checkpoint leaves expired entries
out (`ExpiringSnapshot`: Flink's full-snapshot cleanup; in a delta, an expired upsert is written
as a deletion, so the chain still reads right).

The cursor's list of a key group's keys is a copy taken when it enters the group (O(group) once
per sweep, O(1) per entry visited); a key deleted or changed since is looked up again before it
is touched. Amortised, with `n` entries visited per record and state growing by at most one
entry per record, expired entries left behind stay under about `live / (n - 1)`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .contract import KeyedStateBackend
from .manifest import FileHandle
from .sections import ResetSection, Sections
from .ttl import StateKind, StateTtlConfig, is_dropped, unexpired


@dataclass(slots=True)
class _Cursor:
    """Where the incremental cleanup of one state stands."""

    group_index: int = -1  # index into the backend's owned key groups (sorted)
    group: int = -1
    keys: list[Any] = field(default_factory=list)
    position: int = 0


class TtlStates:
    """The TTL states of one keyed operator subtask: their cleanup and their snapshot filter.

    Args:
        backend: the operator's keyed-state backend.
        now: the task's clock.
    """

    def __init__(self, backend: KeyedStateBackend, now: Callable[[], float]) -> None:
        self.backend = backend
        self.now = now
        self.states: dict[str, tuple[StateKind, StateTtlConfig]] = {}
        self._cursors: dict[str, _Cursor] = {}
        self.cleaned = 0  # expired entries deleted by the incremental cleanup (a metric, for tests)

    def register(self, name: str, kind: StateKind, config: StateTtlConfig) -> None:
        """A handle of state `name` with a TTL was made (`ctx.value_state(name, ttl=...)`).

        Raises:
            ValueError: `name` is registered with another kind or TTL configuration.
        """
        existing = self.states.get(name)
        if existing is not None and existing != (kind, config):
            raise ValueError(f"state {name!r} is already registered with another TTL ({existing[1]!r})")
        self.states[name] = (kind, config)

    def __bool__(self) -> bool:
        return bool(self.states)

    # -- incremental cleanup -------------------------------------------------------------------
    def cleanup(self, records: int) -> None:
        """Visit `incremental_cleanup` entries per record of each TTL state; delete the expired.

        Changes the backend's current key: call it between records, not inside user code.
        """
        if not records:
            return
        now = self.now()
        for name, (kind, config) in self.states.items():
            if config.incremental_cleanup:
                self._sweep(name, kind, config.incremental_cleanup * records, now)

    def _sweep(self, name: str, kind: StateKind, budget: int, now: float) -> None:
        backend = self.backend
        cursor = self._cursors.setdefault(name, _Cursor())
        groups = sorted(backend.key_groups)
        if not groups:
            return
        entered = 0
        while budget > 0:
            if cursor.position >= len(cursor.keys):
                if entered >= len(groups):
                    return  # every owned group visited once in this call: the state is small
                entered += 1
                cursor.group_index = (cursor.group_index + 1) % len(groups)
                cursor.group = groups[cursor.group_index]
                cursor.keys = backend.group_keys(name, cursor.group)
                cursor.position = 0
                budget -= 1  # entering a group costs a visit too: empty groups do not loop forever
                continue
            key = cursor.keys[cursor.position]
            cursor.position += 1
            budget -= 1
            if cursor.group not in backend.key_groups:
                cursor.keys = []  # the group moved away (a live migration)
                continue
            backend.set_current_key(key, cursor.group)
            stored = backend.get(name)
            if stored is None:
                continue
            left = unexpired(kind, stored, now)
            if left is stored:
                continue
            if is_dropped(left):
                backend.delete(name)
            else:
                backend.put(name, left)
            self.cleaned += 1

    # -- cleanup at snapshot -------------------------------------------------------------------
    def filtered(self, snapshot: Any) -> Any:
        """`snapshot` (a `KeyedSnapshot`) with expired entries of TTL states left out of what
        it writes, as of now; the snapshot itself if no TTL state asks for that."""
        names = {n: kind for n, (kind, config) in self.states.items() if config.cleanup_at_snapshot}
        if not names:
            return snapshot
        return ExpiringSnapshot(snapshot, names, self.now())


class ExpiringSnapshot:
    """A `KeyedSnapshot` whose sections leave out entries of TTL states expired at `now`.

    The writer reads it off the processing path; it filters there, building new maps only for
    the TTL states (the frozen maps of the snapshot it wraps are never changed).
    """

    def __init__(self, inner: Any, states: dict[str, StateKind], now: float) -> None:
        self.inner = inner
        self.states = states
        self.now = now
        self.encoded: list[tuple[int, Any]] | None = None

    @property
    def is_delta(self) -> bool:
        return bool(self.inner.is_delta)

    @property
    def base(self) -> tuple[FileHandle, ...]:
        base: tuple[FileHandle, ...] = self.inner.base
        return base

    @property
    def entries(self) -> int | None:
        entries: int | None = self.inner.entries
        return entries

    @property
    def checkpoint_id(self) -> int | None:
        return getattr(self.inner, "checkpoint_id", None)

    @property
    def released(self) -> bool:
        return bool(getattr(self.inner, "released", False))

    def full_sections(self) -> Sections:
        for group, section in self.inner.full_sections():
            yield group, self._full(section)

    def delta_sections(self) -> Sections:
        for group, section in self.inner.delta_sections():
            if isinstance(section, ResetSection):
                delta = section.delta
                yield group, ResetSection(section.copies, self._delta(delta) if isinstance(delta, dict) else delta)
            else:
                yield group, self._delta(section)

    def release(self) -> None:
        self.inner.release()

    def _full(self, section: dict[str, Any]) -> dict[str, Any]:
        states, now = self.states, self.now
        if not states.keys() & section.keys():
            return section
        out = dict(section)
        for name, kind in states.items():
            entries = section.get(name)
            if entries is None:
                continue
            kept = {}
            for key, stored in entries.items():
                left = unexpired(kind, stored, now)
                if not is_dropped(left):
                    kept[key] = left
            if kept:
                out[name] = kept
            else:
                del out[name]
        return out

    def _delta(self, section: dict[str, Any]) -> dict[str, Any]:
        states, now = self.states, self.now
        if not states.keys() & section.keys():
            return section
        out = dict(section)
        for name, kind in states.items():
            change = section.get(name)
            if change is None:
                continue
            upserts, deleted = change
            kept = {}
            gone = list(deleted)
            for key, stored in upserts.items():
                left = unexpired(kind, stored, now)
                if is_dropped(left):
                    gone.append(key)  # expired: as good as deleted, and older values expired too
                else:
                    kept[key] = left
            out[name] = (kept, gone)
        return out
