"""Operator state: lists a subtask keeps outside key groups, split or broadcast on rescale.

Keyed state lives in key groups and moves with them (dissertation §4.2, §4.4); operator state
belongs to a subtask and has no key to route it by. Flink's answer, which this module follows,
is a *list* of items per state: at restore the lists of every old subtask are redistributed by
the state's mode (Flink's `ListState` and `UnionListState` of `CheckpointedFunction`):

- `split`: at the same parallelism each subtask gets its own list back; at another, the old
  lists are concatenated in subtask order and cut into contiguous parts of near-equal length,
  one per new subtask (Flink's round-robin repartitioner cuts them the same way);
- `broadcast`: every subtask gets every item of every old subtask (Flink's union list state),
  at any parallelism, and keeps what it needs.

A snapshot pickles the lists on the task's thread (operator state is small by design, and a
list a user changes after the barrier must not reach the snapshot); the writer only writes the
bytes. The async I/O operator keeps its requests in flight here too (a split list).
"""

from __future__ import annotations

import pickle
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Generic, Literal, TypeVar

T = TypeVar("T")

Redistribution = Literal["split", "broadcast"]
REDISTRIBUTIONS: tuple[Redistribution, ...] = ("split", "broadcast")
# under this key of an operator's own state dict, the operator lists of its user function (two-input
# operators keep a dict of their own: broadcast maps, a join's watermark; `with_operator_lists`)
LISTS_KEY = "__operator_lists__"


def with_operator_lists(state: dict[str, Any] | None, lists: OperatorListSnapshot | None) -> dict[str, Any] | None:
    """An operator's own state dict with its function's operator lists beside it."""
    if lists is None:
        return state
    return {**(state or {}), LISTS_KEY: lists}


@dataclass(frozen=True, slots=True)
class OperatorListSnapshot:
    """One subtask's operator lists at a checkpoint: name → (redistribution, pickled items)."""

    lists: tuple[tuple[str, Redistribution, bytes], ...]

    def items(self) -> Iterator[tuple[str, Redistribution, list[Any]]]:
        for name, mode, data in self.lists:
            yield name, mode, pickle.loads(data)


def redistribute(old: Sequence[OperatorListSnapshot | None], subtask: int, parallelism: int
                 ) -> dict[str, list[Any]]:
    """The lists subtask `subtask` of `parallelism` restores from the snapshots of every old
    subtask (in old-subtask order; None where one had no operator lists)."""
    decoded = [{} if snap is None else {name: (mode, items) for name, mode, items in snap.items()} for snap in old]
    out: dict[str, list[Any]] = {}
    names = sorted({name for lists in decoded for name in lists})
    for name in names:
        modes = {lists[name][0] for lists in decoded if name in lists}
        # one part per old subtask, in subtask order (empty where a subtask had none)
        parts = [lists[name][1] if name in lists else [] for lists in decoded]
        if "broadcast" in modes:
            out[name] = [item for part in parts for item in part]
        elif len(parts) == parallelism:  # the same parallelism: every subtask gets its own back
            out[name] = parts[subtask]
        else:
            out[name] = split_part([item for part in parts for item in part], subtask, parallelism)
    return out


def split_part(items: Sequence[T], subtask: int, parallelism: int) -> list[T]:
    """The contiguous part `subtask` of `parallelism` near-equal parts of `items` (the first
    `len % parallelism` parts one item longer)."""
    n = len(items)
    size, extra = divmod(n, parallelism)
    start = subtask * size + min(subtask, extra)
    return list(items[start:start + size + (1 if subtask < extra else 0)])


class OperatorListState(Generic[T]):
    """A list of items kept by one operator subtask and checkpointed with it.

    Not keyed: every record of the subtask sees the same list. Its mode says what a restore at
    another parallelism does with it (`split` or `broadcast`, module docstring).
    """

    __slots__ = ("name", "mode", "_items")

    def __init__(self, name: str, mode: Redistribution, items: Iterable[T] = ()) -> None:
        self.name = name
        self.mode = mode
        self._items: list[T] = list(items)

    def get(self) -> list[T]:
        """The items (a copy)."""
        return list(self._items)

    def add(self, item: T) -> None:
        """Append one item."""
        self._items.append(item)

    def add_all(self, items: Iterable[T]) -> None:
        """Append items."""
        self._items.extend(items)

    def update(self, items: Iterable[T]) -> None:
        """Replace the items."""
        self._items = list(items)

    def clear(self) -> None:
        """Remove every item."""
        self._items = []

    def __len__(self) -> int:
        return len(self._items)

    def __iter__(self) -> Iterator[T]:
        return iter(list(self._items))


class OperatorStateStore:
    """The operator lists of one operator subtask: registered by name, restored, snapshotted.

    Lists restored from a checkpoint wait here until registered (the function registers them
    in `open`, after the restore), so a list registered late still finds its items.
    """

    def __init__(self) -> None:
        self._lists: dict[str, OperatorListState[Any]] = {}
        self._restored: dict[str, list[Any]] = {}

    def list_state(self, name: str, mode: Redistribution = "split") -> OperatorListState[Any]:
        """Register (or fetch) the operator list `name`.

        Raises:
            ValueError: `mode` is not "split" or "broadcast", or `name` is registered with another mode.
        """
        if mode not in REDISTRIBUTIONS:
            raise ValueError(f"operator list state {name!r}: mode must be 'split' or 'broadcast', got {mode!r}")
        existing = self._lists.get(name)
        if existing is not None:
            if existing.mode != mode:
                raise ValueError(f"operator list state {name!r} is registered with mode {existing.mode!r}")
            return existing
        state: OperatorListState[Any] = OperatorListState(name, mode, self._restored.pop(name, ()))
        self._lists[name] = state
        return state

    def restore(self, old: Sequence[Any], subtask: int, parallelism: int) -> None:
        """Take this subtask's part of the lists of every old subtask (`redistribute`); entries of
        `old` that are not operator lists (another operator's format) are skipped."""
        snapshots = [s if isinstance(s, OperatorListSnapshot) else s.get(LISTS_KEY) if isinstance(s, dict) else None
                     for s in old]
        self._restored = redistribute(snapshots, subtask, parallelism)
        for name, state in self._lists.items():
            state.update(self._restored.pop(name, ()))

    def snapshot(self) -> OperatorListSnapshot | None:
        """The lists, pickled now (None if there are none). Raises what pickling raises."""
        if not self._lists:
            return None
        return OperatorListSnapshot(tuple(
            (name, state.mode, pickle.dumps(state._items, protocol=5)) for name, state in sorted(self._lists.items())
        ))
