"""What every keyed-state backend offers: the contract handles, operators and writers rely on.

Keyed state is a map per *state name* (a string) from key to value (anything picklable), cut
into key groups: a key belongs to one of `max_parallelism` key groups, and a key group is the
unit of snapshot, restore and migration (dissertation §4.2). A backend holds the key groups of
one subtask (`key_groups`). Operators set the current key before user code runs, and state
handles (`handles.py`) then read and write that key's entry. Window state and timers are state
like any other under this contract: a state name per kind, keyed by the record's key.

A checkpoint's snapshot has two parts (ABS §4.2, Algorithm 1; dissertation §4.5, asynchronous
snapshot invocation): `snapshot` *fixes* the state on the task's thread, cheaply, and returns a
`KeyedSnapshot`; a writer then serialises it off the processing path, only reading it, and the
files it wrote come back to the backend on the task's thread (`on_snapshot_written`). Results
travel back by return value and message, never by writing into a shared object from another
thread.

Two backends implement this: the heap backend (`heap.py`, dicts, copy-on-write snapshots) and
the disk backend (`disk.py`, RocksDB). `create_backend` (`backends.py`) picks one.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, Protocol, runtime_checkable

from .keygroups import KeyGroups
from .manifest import FileHandle
from .sections import GroupCopies, KeyedGroups, Sections


class KeyedSnapshot(Protocol):
    """The fixed keyed state of one subtask, as its writer reads it.

    Full or delta (incremental checkpoints, `incremental.py`): a delta holds only the entries
    that changed since the checkpoint whose file chain is `base`, and is written as one more
    file of that chain.
    """

    @property
    def is_delta(self) -> bool:
        """Whether this snapshot is written as a delta over `base` (else as a full file)."""
        ...

    @property
    def base(self) -> tuple[FileHandle, ...]:
        """The file chain a delta builds on, full file first; () for a full snapshot."""
        ...

    @property
    def entries(self) -> int | None:
        """How many entries writing it pickles (all for a full snapshot, the changed ones for a
        delta); None if unknown without reading it all."""
        ...

    # Its sections, pickled before the writer ran (on the task's thread), else None.
    encoded: list[tuple[int, Any]] | None

    def full_sections(self) -> Sections:
        """`(key group, {state: {key: value}})` in ascending key group, for a full file."""
        ...

    def delta_sections(self) -> Sections:
        """`(key group, {state: (upserts, deleted keys)})` in ascending key group, for a delta;
        a `ResetSection` instead for a key group the delta replaces."""
        ...

    def release(self) -> None:
        """Nothing reads this snapshot any more: drop what it holds (the task's thread only)."""
        ...


class KeyedStateBackend(Protocol):
    """The keyed state of one subtask: entries of the current key, batch loops, snapshots.

    Every method runs on the task's thread. A key outside `key_groups` is a routing bug, and
    raises.
    """

    @property
    def key_groups(self) -> KeyGroups:
        """The key groups this backend holds."""
        ...

    @property
    def max_parallelism(self) -> int:
        """The number of key groups of the job: a key's key group is its hash modulo this."""
        ...

    @property
    def current_key(self) -> Any:
        """The key whose entries `get`, `put` and the others act on."""
        ...

    @property
    def current_key_group(self) -> int:
        """The key group of `current_key`."""
        ...

    # -- the current key -----------------------------------------------------------------------
    def set_current_key(self, key: Any, key_group: int | None = None) -> None:
        """Act on `key` from now on (`key_group`, if given, saves hashing it again)."""
        ...

    def get(self, name: str, default: Any = None) -> Any:
        """The current key's value of state `name`, for reading only (never change it in place)."""
        ...

    def get_for_read(self, name: str, default: Any = None) -> Any:
        """The value, for a caller that may change it in place (a private copy of a mutable
        `default` when there is none); in-place changes are kept."""
        ...

    def get_mutable(self, name: str, factory: Callable[[], Any]) -> Any:
        """The value, safe to change in place; `factory()` stored first when there is none."""
        ...

    def put(self, name: str, value: Any) -> None:
        """Set the current key's value of state `name`."""
        ...

    def delete(self, name: str) -> None:
        """Remove the current key's value of state `name`, if any."""
        ...

    def keys(self, name: str) -> Iterator[tuple[int, Any]]:
        """`(key group, key)` of every key holding a value of state `name`."""
        ...

    def entries(self, key: Any) -> dict[str, Any]:
        """Every state's value of `key`, by state name, as private copies: a live state query
        (reads one key group; leaves the current key alone)."""
        ...

    def group_keys(self, name: str, key_group: int) -> list[Any]:
        """The keys holding a value of state `name` in one owned key group, as a list (a copy:
        the caller may change the state while it walks it; the TTL cleanup does)."""
        ...

    # -- batch loops: one call per batch instead of several per record ------------------------
    def count_into(self, out: list[Any], name: str, keys: list[Any], key_groups: list[int]) -> None:
        """Add one to each key's count; append `(key, new count)` per key.

        On an exception, `len(out)` is the index of the record that raised.
        """
        ...

    def reduce_into(
        self, out: list[Any], name: str, records: list[Any], keys: list[Any], key_groups: list[int],
        fn: Callable[[Any, Any], Any],
    ) -> None:
        """Fold each record into its key's value (a key's first record is its value); append
        each result. On an exception, `len(out)` is the index of the record that raised."""
        ...

    # -- checkpoints ---------------------------------------------------------------------------
    def snapshot(self, checkpoint_id: int | None = None) -> KeyedSnapshot:
        """Fix the state (the synchronous part: cheap); later writes never reach the snapshot.

        With a `checkpoint_id` the snapshot may be a delta (incremental checkpoints); without
        one it is full and leaves the incremental bookkeeping alone.
        """
        ...

    def on_snapshot_written(self, checkpoint_id: int, chain: tuple[FileHandle, ...] | None) -> None:
        """The writer of `checkpoint_id`'s snapshot is done; called on the task's thread.

        `chain` is the file chain the snapshot was written as (a delta's base, then its own
        file; () if the state was empty), or None if nothing was written (no checkpoint
        storage, or the write failed): only a written snapshot can become the base of a later
        delta. From this call on nothing reads the snapshot, so the backend releases it.
        """
        ...

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        """Checkpoint `checkpoint_id` is complete: a later delta may build on it."""
        ...

    def restore(self, groups: KeyedGroups) -> None:
        """Load key groups (any superset of ours: foreign key groups are skipped)."""
        ...

    def reassign(self, owned: KeyGroups, gained: KeyedGroups, copies: GroupCopies | None = None) -> None:
        """Own `owned` from now on: drop the key groups no longer owned, load `gained` (a live
        migration, right after a snapshot; `copies`: the sections `gained` was read from, per
        key group, which a backend may write as they are instead of its keys); the next
        snapshot replaces the dropped and gained groups, so it may stay a delta."""
        ...

    def close(self) -> None:
        """Free what the backend holds (its working files, for the disk backend)."""
        ...


@runtime_checkable
class RawKeyGroupMaps(Protocol):
    """Direct access to one state's entries of one key group, as a dict (heap backend only).

    For vectorized operators that batch their updates: they write
    the dict in bulk and then report the keys they wrote. A backend whose state is not a dict
    in memory (the disk backend) does not offer this; check with `isinstance`.
    """

    def raw_map(self, name: str, key_group: int) -> dict[Any, Any]:
        """A writable map of one key group; values written must be immutable (e.g. numbers)."""
        ...

    def mark_changed(self, name: str, key_group: int, keys: list[Any]) -> None:
        """Record keys written through `raw_map`, or an incremental checkpoint misses them."""
        ...


class RawMapBackend(KeyedStateBackend, RawKeyGroupMaps, Protocol):
    """A keyed-state backend that also offers `RawKeyGroupMaps`."""
