"""State time-to-live: keyed values that expire a while after they were written (or read).

Flink's `StateTtlConfig`, in processing time: a value, a list element or a map entry of a state
with a TTL is stored with the time it expires, `(value, expires_at)`, and a handle reads it as
absent once that time has passed. Expired entries leave the state three ways, so a job over an
unbounded key space keeps flat state without timers of its own:

- on access: a handle that reads an expired entry deletes it (visibility "never_return_expired");
- incrementally: after each batch the operator visits a few entries per record of each TTL
  state (`StateTtlConfig.incremental_cleanup`) and deletes the expired ones
  (`ttl_cleanup.TtlCleaner`, Flink's incremental cleanup of the heap backend);
- at snapshot: what a checkpoint writes leaves expired entries out (`ttl_cleanup.ExpiringSnapshot`,
  Flink's full-snapshot cleanup).

RocksDB's own TTL cleanup is a compaction filter (Flink's `FlinkCompactionFilter`). `rocksdict`
exposes no compaction filter to Python (its `Options` has no such hook; its `AccessType.with_ttl`
opens a database whose every entry expires at one TTL after its write, whatever its state), so
the disk backend cleans up the same three ways as the heap; the incremental cleanup reads one
key group at a time there.

Time is the task's clock (seconds since the epoch), so a restored entry expires when it would
have without the failure.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from enum import Enum
from typing import Any, Literal, TypeVar

from .contract import KeyedStateBackend
from .handles import ListState, MapState, ValueState

T = TypeVar("T")
K = TypeVar("K")
V = TypeVar("V")

UpdateOn = Literal["write", "read_and_write"]
Visibility = Literal["never_return_expired", "return_expired_if_not_cleaned_up"]
Now = Callable[[], float]


@dataclass(frozen=True, slots=True)
class StateTtlConfig:
    """How long entries of a state live, and how they are cleaned up.

    Args:
        ttl: seconds an entry lives after it was written (and, with `update_on="read_and_write"`,
            after it was last read).
        update_on: `"write"` (created or updated) or `"read_and_write"` (a read renews it too).
        visibility: `"never_return_expired"` (an expired entry reads as absent, and is deleted
            then) or `"return_expired_if_not_cleaned_up"` (it reads as it was until a cleanup
            removed it).
        incremental_cleanup: entries of this state visited per record processed, after each
            batch, to delete the expired ones (0: only on access and at snapshot).
        cleanup_at_snapshot: leave expired entries out of checkpoints.

    Example:
        >>> ttl = StateTtlConfig(3600, update_on="read_and_write")
        >>> ttl.ttl, ttl.visibility
        (3600.0, 'never_return_expired')
    """

    ttl: float
    update_on: UpdateOn = "write"
    visibility: Visibility = "never_return_expired"
    incremental_cleanup: int = 5
    cleanup_at_snapshot: bool = True

    def __post_init__(self) -> None:
        ttl = self.ttl
        if isinstance(ttl, bool) or not isinstance(ttl, (int, float)) or not math.isfinite(ttl) or ttl <= 0:
            raise ValueError(f"StateTtlConfig.ttl must be a positive number of seconds, got {ttl!r}")
        object.__setattr__(self, "ttl", float(ttl))
        if self.update_on not in ("write", "read_and_write"):
            raise ValueError(f"StateTtlConfig.update_on must be 'write' or 'read_and_write', got {self.update_on!r}")
        if self.visibility not in ("never_return_expired", "return_expired_if_not_cleaned_up"):
            raise ValueError("StateTtlConfig.visibility must be 'never_return_expired' or "
                             f"'return_expired_if_not_cleaned_up', got {self.visibility!r}")
        cleanup = self.incremental_cleanup
        if isinstance(cleanup, bool) or not isinstance(cleanup, int) or cleanup < 0:
            raise ValueError(f"StateTtlConfig.incremental_cleanup must be an int >= 0, got {cleanup!r}")


class StateKind(Enum):
    """What a TTL state stores per key: one stamped value, stamped elements, stamped entries."""

    VALUE = "value"
    LIST = "list"
    MAP = "map"


_DROP = object()  # `unexpired`'s answer for an entry with nothing left


def unexpired(kind: StateKind, stored: Any, now: float) -> Any:
    """What is left of a key's stored entry at `now`: the entry itself if nothing in it expired,
    a filtered copy, or `_DROP` (`is_dropped`) if nothing is left."""
    if kind is StateKind.VALUE:
        return _DROP if _expires(stored) <= now else stored
    if kind is StateKind.LIST:
        kept = [e for e in stored if _expires(e) > now]
        return stored if len(kept) == len(stored) else (kept or _DROP)
    kept_map = {k: e for k, e in stored.items() if _expires(e) > now}
    return stored if len(kept_map) == len(stored) else (kept_map or _DROP)


def is_dropped(value: Any) -> bool:
    return value is _DROP


def _expires(stamped: Any) -> float:
    """The expiry of a stamped `(value, expires_at)`; a value stored without one never expires
    (state written before its TTL was configured)."""
    if type(stamped) is tuple and len(stamped) == 2 and type(stamped[1]) is float:
        expires: float = stamped[1]
        return expires
    return math.inf


def _value(stamped: Any) -> Any:
    return stamped[0] if type(stamped) is tuple and len(stamped) == 2 and type(stamped[1]) is float else stamped


class TtlValueState(ValueState[T]):
    """A `ValueState` whose value expires `ttl` seconds after it was written (or read)."""

    __slots__ = ("_ttl", "_now", "_refresh", "_hide")

    def __init__(self, backend: KeyedStateBackend, name: str, default: T | None, config: StateTtlConfig,
                 now: Now) -> None:
        super().__init__(backend, name, default)
        self._ttl, self._now = config.ttl, now
        self._refresh = config.update_on == "read_and_write"
        self._hide = config.visibility == "never_return_expired"

    def value(self) -> T:
        backend, name = self._backend, self._name
        stored = backend.get_for_read(name, None)
        if stored is None:
            return self._default  # type: ignore[return-value]  # None only for a ValueState[Any]
        now = self._now()
        if _expires(stored) <= now:
            if self._hide:
                backend.delete(name)
                return self._default  # type: ignore[return-value]
            return _value(stored)  # type: ignore[no-any-return]
        value: T = _value(stored)
        if self._refresh:
            backend.put(name, (value, now + self._ttl))
        return value

    def update(self, value: T) -> None:
        self._backend.put(self._name, (value, self._now() + self._ttl))


class TtlListState(ListState[T]):
    """A `ListState` whose elements each expire `ttl` seconds after they were added (or read)."""

    __slots__ = ("_ttl", "_now", "_refresh", "_hide")

    def __init__(self, backend: KeyedStateBackend, name: str, config: StateTtlConfig, now: Now) -> None:
        super().__init__(backend, name)
        self._ttl, self._now = config.ttl, now
        self._refresh = config.update_on == "read_and_write"
        self._hide = config.visibility == "never_return_expired"

    def get(self) -> list[T]:
        backend, name = self._backend, self._name
        stored = backend.get(name, ())
        if not stored:
            return []
        now = self._now()
        kept = [e for e in stored if _expires(e) > now] if self._hide else list(stored)
        if self._refresh and kept:
            backend.put(name, [(_value(e), now + self._ttl) for e in kept])
        elif len(kept) != len(stored):
            if kept:
                backend.put(name, kept)
            else:
                backend.delete(name)
        return [_value(e) for e in kept]

    def add(self, value: T) -> None:
        self._backend.get_mutable(self._name, list).append((value, self._now() + self._ttl))

    def add_all(self, values: list[T]) -> None:
        expires = self._now() + self._ttl
        self._backend.get_mutable(self._name, list).extend((v, expires) for v in values)

    def update(self, values: list[T]) -> None:
        expires = self._now() + self._ttl
        self._backend.put(self._name, [(v, expires) for v in values])


class TtlMapState(MapState[K, V]):
    """A `MapState` whose entries each expire `ttl` seconds after they were put (or read)."""

    __slots__ = ("_ttl", "_now", "_refresh", "_hide")

    def __init__(self, backend: KeyedStateBackend, name: str, config: StateTtlConfig, now: Now) -> None:
        super().__init__(backend, name)
        self._ttl, self._now = config.ttl, now
        self._refresh = config.update_on == "read_and_write"
        self._hide = config.visibility == "never_return_expired"

    def _read(self) -> dict[K, V]:
        """The live entries, unstamped (expired ones deleted first, if hidden)."""
        backend, name = self._backend, self._name
        stored = backend.get(name)
        if not stored:
            return {}
        now = self._now()
        if self._hide:
            kept = {k: e for k, e in stored.items() if _expires(e) > now}
            if len(kept) != len(stored):
                if kept:
                    backend.put(name, kept)
                else:
                    backend.delete(name)
        else:
            kept = stored
        if self._refresh and kept:
            backend.put(name, {k: (_value(e), now + self._ttl) for k, e in kept.items()})
        return {k: _value(e) for k, e in kept.items()}

    def get(self, key: K, default: V | None = None) -> V | None:
        """The value under `key`, if it has not expired (a read renews it, or deletes it)."""
        backend, name = self._backend, self._name
        stored = backend.get(name)
        if not stored or key not in stored:
            return default
        entry, now = stored[key], self._now()
        if _expires(entry) <= now:
            if not self._hide:
                return _value(entry)  # type: ignore[no-any-return]
            del backend.get_mutable(name, dict)[key]
            if not backend.get(name):
                backend.delete(name)
            return default
        value: V = _value(entry)
        if self._refresh:
            backend.get_mutable(name, dict)[key] = (value, now + self._ttl)
        return value

    def put(self, key: K, value: V) -> None:
        self._backend.get_mutable(self._name, dict)[key] = (value, self._now() + self._ttl)

    def __iter__(self) -> Iterator[K]:
        return iter(self.keys())
