"""User-facing keyed state: handles that read and write the current key's entry.

Handles are registered by name in a function's `open()` (only registered state is part of a
checkpoint: state is declared through a descriptor, dissertation §4.3) and always act on the key
of the record being processed. They work on any backend (`KeyedStateBackend`, `contract.py`).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Generic, TypeVar

from .contract import KeyedStateBackend

T = TypeVar("T")
K = TypeVar("K")
V = TypeVar("V")


class ValueState(Generic[T]):
    """One value per key.

    Values are checkpointed as they are when `update` is called; a value changed in place
    after `value()` is copied first, so a checkpoint in flight never sees the change.
    """

    __slots__ = ("_backend", "_name", "_default")

    def __init__(self, backend: KeyedStateBackend, name: str, default: T | None = None) -> None:
        self._backend, self._name, self._default = backend, name, default

    def value(self) -> T:
        """The current key's value, or the default when it has none (a state without a default
        is a `ValueState[Any]`, or annotate it `ValueState[X | None]`)."""
        value: T = self._backend.get_for_read(self._name, self._default)
        return value

    def update(self, value: T) -> None:
        """Set the current key's value."""
        self._backend.put(self._name, value)

    def clear(self) -> None:
        """Remove the current key's value."""
        self._backend.delete(self._name)


class ListState(Generic[T]):
    """A list of values per key."""

    __slots__ = ("_backend", "_name")

    def __init__(self, backend: KeyedStateBackend, name: str) -> None:
        self._backend, self._name = backend, name

    def get(self) -> list[T]:
        """A copy of the current key's list (empty when it has none)."""
        return list(self._backend.get(self._name, ()))

    def add(self, value: T) -> None:
        """Append one value to the current key's list."""
        self._backend.get_mutable(self._name, list).append(value)

    def add_all(self, values: list[T]) -> None:
        """Append values to the current key's list."""
        self._backend.get_mutable(self._name, list).extend(values)

    def update(self, values: list[T]) -> None:
        """Replace the current key's list."""
        self._backend.put(self._name, list(values))

    def clear(self) -> None:
        """Remove the current key's list."""
        self._backend.delete(self._name)


class MapState(Generic[K, V]):
    """A map per key."""

    __slots__ = ("_backend", "_name")

    def __init__(self, backend: KeyedStateBackend, name: str) -> None:
        self._backend, self._name = backend, name

    def _read(self) -> dict[K, V]:
        return self._backend.get(self._name) or {}

    def get(self, key: K, default: V | None = None) -> V | None:
        """The value under `key` in the current key's map."""
        return self._read().get(key, default)

    def put(self, key: K, value: V) -> None:
        """Set `key` in the current key's map."""
        self._backend.get_mutable(self._name, dict)[key] = value

    def remove(self, key: K) -> None:
        """Remove `key` from the current key's map, if present."""
        if key in self._read():
            del self._backend.get_mutable(self._name, dict)[key]

    def contains(self, key: K) -> bool:
        """Whether the current key's map holds `key`."""
        return key in self._read()

    def keys(self) -> list[K]:
        """The keys of the current key's map."""
        return list(self._read().keys())

    def values(self) -> list[V]:
        """The values of the current key's map."""
        return list(self._read().values())

    def items(self) -> list[tuple[K, V]]:
        """The `(key, value)` pairs of the current key's map."""
        return list(self._read().items())

    def __iter__(self) -> Iterator[K]:
        return iter(self.keys())

    def is_empty(self) -> bool:
        """Whether the current key's map is empty (or absent)."""
        return not self._read()

    def clear(self) -> None:
        """Remove the current key's whole map."""
        self._backend.delete(self._name)
