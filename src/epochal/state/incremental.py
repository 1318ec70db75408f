"""Incremental checkpoints: which keys changed, and what a subtask's next snapshot builds on.

ChronoStream §III-B ("asynchronous delta checkpointing") and the dissertation's incremental
snapshots (§4.5): a snapshot may hold only the entries that changed since the subtask's last
*complete* checkpoint (a delta), which the manifest then lists after that checkpoint's files.
Backends record the keys written since the last snapshot per key group and state (`ChangedKeys`);
`IncrementalTracker` decides, per snapshot, between a delta and a full file, and learns the file
chain each snapshot was written as (`on_written`) so a later delta can build on it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .manifest import FileHandle
from .sections import GroupCopies

# key group → state name → keys written or deleted since the last snapshot
ChangedKeys = dict[int, dict[str, set[Any]]]

# A snapshot that changed at least this share of the entries is written in full.
_MOSTLY_CHANGED = 0.5
# After such a snapshot, up to this many epochs leave their changes unrecorded (see below).
_MAX_UNTRACKED = 8


def add_changed(changed: ChangedKeys, key_group: int, name: str, key: Any) -> None:
    """Record that `key` of state `name` in `key_group` was written or deleted."""
    changed.setdefault(key_group, {}).setdefault(name, set()).add(key)


def count_changed(changed: ChangedKeys) -> int:
    """How many entries `changed` names, over all key groups and states."""
    return sum(len(keys) for states in changed.values() for keys in states.values())


@dataclass(slots=True)
class _Pending:
    """A snapshot whose checkpoint has not completed yet."""

    changed: ChangedKeys | None  # the keys its epoch changed; None if the epoch went unrecorded
    resets: GroupCopies  # key groups its epoch replaced before any change (a migration)
    chain: tuple[FileHandle, ...] | None = None  # the files it was written as, once written
    copied: int = 0  # bytes of its file that are other files' sections, copied (`DeltaPlan.resets`)


@dataclass(frozen=True, slots=True)
class DeltaPlan:
    """What a snapshot is written as: a delta of `changed` keys and `resets` (key groups whose
    content was replaced by copied sections, or emptied) over the chain `base`; or, when
    `changed` is None, a full file."""

    changed: ChangedKeys | None
    resets: GroupCopies
    base: tuple[FileHandle, ...]


FULL = DeltaPlan(None, {}, ())


class IncrementalTracker:
    """Which checkpoint a subtask's next snapshot builds on, and whether to write it in full.

    A delta must cover every change since a checkpoint that is *complete*: a snapshot whose
    checkpoint is later aborted must not become a base. So each snapshot's changed keys are kept
    until a checkpoint completes (`on_complete`), and a delta is the union of the changed keys
    of every snapshot taken since its base. After a restore there is no base: the first
    checkpoint is full. The base's file chain is what the snapshot was written as, learnt on the
    task's thread (`on_written`); a snapshot never reported written never becomes a base.

    Recording changes costs a set insertion per key and epoch, and is wasted on a state that
    changes mostly between checkpoints: its snapshots are written in full anyway. So after two
    snapshots in a row that changed most entries, the next epoch goes unrecorded
    (`tracks_changes` is False; its snapshot is full); while the recorded snapshots in between
    keep changing most entries, the unrecorded stretches double, up to `_MAX_UNTRACKED`. One
    mostly-changed snapshot alone changes nothing: a state's first checkpoint is all new keys.
    A workload that turns sparse waits at most `_MAX_UNTRACKED` checkpoints for its deltas.

    A chain is at most `compact_every` files long, and its deltas never outweigh
    `compact_ratio` times its full file: the snapshot that would break either is full. Sections
    a delta copied from another subtask's chain (the key groups a live migration brought) count
    as full file, not as delta: they are what a full file would hold for those groups, and
    writing the whole state again because a quarter of it moved here would hold the GIL for
    seconds (measured: 813 MB in 4.6 s, right after a move of 250 MB).
    """

    def __init__(self, incremental: bool = True, compact_every: int = 10, compact_ratio: float = 1.0) -> None:
        self.incremental = incremental
        self.compact_every = compact_every
        self.compact_ratio = compact_ratio
        self.base_id: int | None = None
        self.base_chain: tuple[FileHandle, ...] = ()
        self.base_copied = 0  # bytes of the base chain's deltas that are copied sections
        self._pending: dict[int, _Pending] = {}
        self._mostly_changed_streak = 0
        self._untracked_left = 0

    @property
    def tracks_changes(self) -> bool:
        """Whether the epoch starting now should record the keys it changes."""
        return self.incremental and self._untracked_left == 0

    def _needs_full(self) -> bool:
        if not self.incremental or self.base_id is None:
            return True
        if len(self.base_chain) >= self.compact_every:
            return True
        if not self.base_chain:
            return False  # the base held no state at all: a delta over nothing is exact
        base_bytes = self.base_chain[0].size + self.base_copied
        delta_bytes = sum(h.size for h in self.base_chain[1:]) - self.base_copied
        return delta_bytes > self.compact_ratio * base_bytes

    def plan(
        self, checkpoint_id: int, changed: ChangedKeys | None, entries: int | None = None,
        resets: GroupCopies | None = None,
    ) -> DeltaPlan:
        """Record this snapshot's changes; return what it is written as.

        `changed` is None for an epoch that recorded no changes: the snapshot is full.
        `entries`, the number of entries in the state if known, lets a snapshot that changed
        most of them be written in full: about as large as the delta, cheaper to build, and it
        ends the chain. `resets` are key groups this epoch replaced before it changed any of
        their keys (`KeyedStateBackend.reassign`): a delta replaces each with its copies.
        """
        self._pending[checkpoint_id] = _Pending(changed, resets or {})
        if changed is None:
            self._untracked_left = max(0, self._untracked_left - 1)
            return FULL
        if entries:  # a subtask that holds nothing (a standby, or all its groups moved away) changed nothing
            if count_changed(changed) >= _MOSTLY_CHANGED * entries:
                self._mostly_changed_streak += 1
                if self._mostly_changed_streak >= 2:
                    self._untracked_left = min(2 ** (self._mostly_changed_streak - 2), _MAX_UNTRACKED)
                return FULL
            self._mostly_changed_streak = 0
        if self._needs_full():
            return FULL
        base_id = self.base_id
        assert base_id is not None  # `_needs_full` says so
        union: ChangedKeys = {}
        union_resets: GroupCopies = {}
        for cid in sorted(self._pending):
            if cid <= base_id:
                continue
            since_base = self._pending[cid]
            if since_base.changed is None:  # an epoch since the base went unrecorded
                return FULL
            for key_group, copies in since_base.resets.items():  # before its epoch's changes
                union.pop(key_group, None)
                union_resets[key_group] = copies
            for key_group, states in since_base.changed.items():
                target = union.setdefault(key_group, {})
                for name, keys in states.items():
                    target.setdefault(name, set()).update(keys)
        self._pending[checkpoint_id].copied = sum(len(c.data) for copies in union_resets.values() for c in copies)
        return DeltaPlan(union, union_resets, self.base_chain)

    def on_written(self, checkpoint_id: int, chain: tuple[FileHandle, ...] | None) -> None:
        """The snapshot of `checkpoint_id` was written as `chain` (None: nothing was written)."""
        pending = self._pending.get(checkpoint_id)
        if pending is not None:
            pending.chain = chain

    def on_complete(self, checkpoint_id: int) -> None:
        """Checkpoint `checkpoint_id` is complete: it becomes the base of the next delta."""
        pending = self._pending.get(checkpoint_id)
        chain = pending.chain if pending is not None else None
        if chain is not None:
            assert pending is not None
            extends = len(chain) > 1 and chain[:-1] == self.base_chain
            self.base_copied = (self.base_copied if extends or chain == self.base_chain else 0) + pending.copied
            self.base_id, self.base_chain = checkpoint_id, chain
        elif self.base_id is None or checkpoint_id > self.base_id:
            # not ours, or never reported written (no storage, or not yet): the changed keys up
            # to here are dropped, so nothing can build on the old base any more
            self.base_id, self.base_chain, self.base_copied = None, (), 0
        for cid in [c for c in self._pending if c <= checkpoint_id]:
            del self._pending[cid]

    def reset(self) -> None:
        """Forget the base: the next snapshot is full."""
        self.base_id, self.base_chain, self.base_copied = None, (), 0
        self._pending.clear()
        self._mostly_changed_streak = self._untracked_left = 0
