"""One key's window state, as plain picklable values, and what the slicing core hands back.

A `SliceStore` is meant to live in keyed state (one per key, inside its key group): it is
checkpointed, restored and migrated like any value, so it holds only floats, ints, lists, dicts and
the partials themselves; the code that reads and changes it lives in `Windowing` and never in the
store. Its periodic part is Cutty's aggregate store over slices (dissertation §5.5.2: add, lookup,
purge), keyed by slice start; sessions and user-defined windows keep their own slices.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, NamedTuple


class Admission(Enum):
    """What became of one record (the per-record path's answer)."""

    ON_TIME = "on_time"  # it is in no complete window (or in no window at all)
    LATE_UPDATE = "late_update"  # behind the watermark, within the allowed lateness: call `fire`
    PARTLY_LATE = "partly_late"  # too late for some queries (`late_queries`), counted by others
    LATE = "late"  # too late for every query it belongs to: hand it to the late output


class Firing(Enum):
    """Why a window's result was emitted."""

    ON_TIME = "on_time"  # the watermark passed its end: its first result
    LATE_UPDATE = "late_update"  # late records changed a window that was already complete
    EARLY = "early"  # a partial result before the end (a trigger's early firing)
    COUNT = "count"  # a count trigger's firing: the window's result so far


class FiredWindow(NamedTuple):
    """One window result of one key."""

    query: str
    start: float
    end: float
    result: Any
    firing: Firing


class FireFirst(RuntimeError):
    """Records were added at a watermark past windows that were due but not fired.

    The contract: before adding records at watermark `w`, call `fire(store, w)` for every store
    whose `next_fire_time` is at or below `w` (what event-time timers per key do).
    """


@dataclass(slots=True)
class WindowCursor:
    """Where one periodic query's windows stand (associative aggregates): the slices of the last
    window emitted, starting in `[lo, hi)`, as a two-stack queue (sliding aggregation with two
    stacks): `front` holds `(slice start, combined partial from it to the front's end)`, earliest
    last, `back` the slices pushed since, combined in `back_partial`. A window costs O(1) amortised
    combines per slice entering or leaving it.
    """

    lo: float
    hi: float
    front: list[tuple[float, Any]] = field(default_factory=list)
    back: list[float] = field(default_factory=list)
    back_partial: Any = None


@dataclass(slots=True)
class SessionSlices:
    """One session query's sessions, sorted: one slice (partial) per session.

    Session `i` is `[starts[i], ends[i])` (its last timestamp + gap); `changed[i]` says it has
    records its last emitted result did not have (or was never emitted).
    """

    starts: list[float] = field(default_factory=list)
    ends: list[float] = field(default_factory=list)
    partials: list[Any] = field(default_factory=list)
    changed: list[bool] = field(default_factory=list)


@dataclass(slots=True)
class EndedWindow:
    """A user-defined window that has ended, kept while late records may still change it."""

    query: int
    first_slice: int  # slice ids [first_slice, end_slice)
    end_slice: int
    start: float
    end: float
    changed: bool = False


@dataclass(slots=True)
class CuttyState:
    """One key's user-defined windows: Cutty's shared aggregator (dissertation §5.5.2, Algorithm 8).

    Records wait in `staged` until the watermark passes them, so each window function sees them
    in event-time order. Slices are cut where any window begins or ends; slice `i` (an id) starts
    at `slice_starts[i - base]` with partial `slice_partials[i - base]` (None: empty); the last
    one is the active partial.
    """

    states: list[Any]
    staged: list[tuple[float, Any]] = field(default_factory=list)
    staged_min: float = math.inf
    base: int = 0
    slice_starts: list[float] = field(default_factory=list)
    slice_partials: list[Any] = field(default_factory=list)
    active: list[list[int]] = field(default_factory=list)  # per query: first slice of each open window, FIFO
    ended: list[EndedWindow] = field(default_factory=list)


@dataclass(slots=True)
class SliceStore:
    """All window state of one key.

    `fired` is the watermark this store was last fired at; `next_fire` the watermark at which it
    must be fired next (inf: nothing pending). The periodic queries share `partials` (slice start
    → partial), `starts` (sorted) and `ends` (the end of each slice in `starts`' order); `lo`/`hi`
    cache the slice the last record went to.
    """

    fired: float = -math.inf
    next_fire: float = math.inf
    lo: float = math.inf
    hi: float = -math.inf
    partials: dict[float, Any] = field(default_factory=dict)
    starts: list[float] = field(default_factory=list)
    ends: list[float] = field(default_factory=list)
    cursors: list[WindowCursor | None] = field(default_factory=list)
    refires: set[tuple[int, int]] = field(default_factory=set)  # (periodic query, window index)
    sessions: list[SessionSlices] = field(default_factory=list)
    cutty: CuttyState | None = None

    def __deepcopy__(self, memo: dict[int, Any]) -> SliceStore:
        """The copy a key's state takes on its first change after a checkpoint (copy on write).

        `copy.deepcopy`'s generic walk cost a fifth of a fine-grained sliding window job: count,
        sum, min and max partials are numbers, copied by copying the dict; the cursors are caches
        (`Grid._window` rebuilds one that is None), so the copy starts without them.
        """
        partials = self.partials
        if not all(type(v) in _ATOMIC for v in partials.values()):
            partials = copy.deepcopy(partials, memo)
        return SliceStore(
            fired=self.fired, next_fire=self.next_fire, lo=self.lo, hi=self.hi, partials=dict(partials),
            starts=list(self.starts), ends=list(self.ends), cursors=[None] * len(self.cursors),
            refires=set(self.refires), sessions=copy.deepcopy(self.sessions, memo),
            cutty=copy.deepcopy(self.cutty, memo),
        )


_ATOMIC = frozenset({int, float, bool, str, type(None)})  # partials a deep copy may share
