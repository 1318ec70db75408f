"""Window definitions as plan data: what the runtime's shared slicing reads.

The dissertation's chapter 5 (Cutty) sorts windows by what a system can know about them. Periodic
windows (`Tumbling`, `Sliding`; §5.2.1) have boundaries computable by arithmetic, so the slice
edges of every periodic query of one operator are the union of their window starts and ends
(§5.3.1) and never need a list. Sessions (`Session`; §5.2.2) are data-driven: a window is a run of
records closer than the gap. A user-defined deterministic window (`DeterministicWindow`; §5.4.2)
is Cutty's class: a function called per record, in event-time order, that says how many windows
begin and how many end at that record (f_disc : T → ⟨W_begin, W_end⟩), e.g. punctuation or
"price regime" windows.

Durations are seconds (`int`/`float`) or `datetime.timedelta`, normalised to float seconds.
Window `k` of a periodic definition is `[offset + k * slide, offset + k * slide + size)`; every
part of the system computes a boundary with exactly these expressions, so edges compare exactly
as floats (a record on an edge lands in the same window everywhere).
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, Generic, NamedTuple, Protocol, TypeVar

from .time import Duration, seconds

S = TypeVar("S")



class Window(NamedTuple):
    """The window a `ProcessWindowFunction` is called for: `[start, end)` of query `query`.

    One public type, made by the running window operator and read by user code
    (`epochal.windows.Window`)."""

    query: str
    start: float
    end: float

class _Shape(Protocol):
    @property
    def size(self) -> float: ...
    @property
    def slide(self) -> float: ...
    @property
    def offset(self) -> float: ...
    def start_of(self, k: int) -> float: ...
    def end_of(self, k: int) -> float: ...
    def last_start_index(self, ts: float) -> int: ...
    def first_end_index(self, ts: float) -> int: ...
    def window_starts(self, t0: float, t1: float) -> list[float]: ...
    def window_ends(self, t0: float, t1: float) -> list[float]: ...


class _Periodic:
    """Arithmetic shared by the periodic definitions (they provide size, slide and offset)."""

    __slots__ = ()

    def start_of(self: _Shape, k: int) -> float:
        """The start of window `k`."""
        return self.offset + k * self.slide

    def end_of(self: _Shape, k: int) -> float:
        """The end (exclusive) of window `k`."""
        return (self.offset + k * self.slide) + self.size

    def last_start_index(self: _Shape, ts: float) -> int:
        """The largest `k` whose window starts at or before `ts` (exact: floor, then checked)."""
        offset, slide = self.offset, self.slide
        k = math.floor((ts - offset) / slide)
        while offset + (k + 1) * slide <= ts:
            k += 1
        while offset + k * slide > ts:
            k -= 1
        return k

    def first_end_index(self: _Shape, ts: float) -> int:
        """The smallest `k` whose window ends after `ts`."""
        offset, slide, size = self.offset, self.slide, self.size
        k = math.floor((ts - offset - size) / slide) + 1
        while (offset + (k - 1) * slide) + size > ts:
            k -= 1
        while (offset + k * slide) + size <= ts:
            k += 1
        return k

    def windows_containing(self: _Shape, ts: float) -> list[tuple[float, float]]:
        """The `(start, end)` of every window holding `ts`, oldest first (none in a sampling gap)."""
        out = []
        for k in range(self.first_end_index(ts), self.last_start_index(ts) + 1):
            out.append((self.start_of(k), self.end_of(k)))
        return out

    def window_starts(self: _Shape, t0: float, t1: float) -> list[float]:
        """Window starts in `[t0, t1)`."""
        k = self.last_start_index(t0)
        if self.start_of(k) < t0:
            k += 1
        out = []
        while (start := self.start_of(k)) < t1:
            out.append(start)
            k += 1
        return out

    def window_ends(self: _Shape, t0: float, t1: float) -> list[float]:
        """Window ends in `[t0, t1)`."""
        k = self.first_end_index(t0)
        if self.end_of(k - 1) >= t0:  # first_end_index is strict: an end exactly at t0 counts
            k -= 1
        out = []
        while (end := self.end_of(k)) < t1:
            out.append(end)
            k += 1
        return out

    def boundaries(self: _Shape, t0: float, t1: float) -> list[float]:
        """Window boundaries (starts and ends) in `[t0, t1)`, sorted and distinct: this query's
        slice edges there (§5.3.1); an operator's edges are the union over its queries."""
        return sorted(set(self.window_starts(t0, t1)) | set(self.window_ends(t0, t1)))


def _offset(value: Duration, period: float, period_name: str) -> float:
    out = seconds(value, "offset")
    if not out < period:
        raise ValueError(f"offset must be in [0, {period_name}) = [0, {period}), got {value!r}")
    return out


@dataclass(frozen=True, slots=True, init=False)
class Tumbling(_Periodic):
    """Fixed, non-overlapping windows `[offset + k * size, offset + (k + 1) * size)`.

    Args:
        size: the window length (seconds or `timedelta`, > 0).
        offset: where windows start relative to the epoch, in `[0, size)` (e.g. 3600 windows of a
            `Tumbling(timedelta(days=1), offset=timedelta(hours=6))`).
    """

    size: float
    offset: float

    def __init__(self, size: Duration, offset: Duration = 0) -> None:
        size_s = seconds(size, "size", allow_zero=False)
        object.__setattr__(self, "size", size_s)
        object.__setattr__(self, "offset", _offset(offset, size_s, "size"))

    @property
    def slide(self) -> float:
        """A tumbling window slides by its size."""
        return self.size


@dataclass(frozen=True, slots=True, init=False)
class Sliding(_Periodic):
    """Windows of `size` starting every `slide`: `[offset + k * slide, offset + k * slide + size)`.

    `size` need not be a multiple of `slide`. With `slide > size` windows leave gaps (sampling):
    a record in a gap is in no window of this query.

    Args:
        size: the window length (> 0).
        slide: the distance between window starts (> 0).
        offset: where windows start relative to the epoch, in `[0, slide)`.
    """

    size: float
    slide: float
    offset: float

    def __init__(self, size: Duration, slide: Duration, offset: Duration = 0) -> None:
        size_s = seconds(size, "size", allow_zero=False)
        slide_s = seconds(slide, "slide", allow_zero=False)
        object.__setattr__(self, "size", size_s)
        object.__setattr__(self, "slide", slide_s)
        object.__setattr__(self, "offset", _offset(offset, slide_s, "slide"))


@dataclass(frozen=True, slots=True, init=False)
class Session:
    """Windows of activity: records closer than `gap` (or exactly `gap` apart) share a window.

    A session is `[first timestamp, last timestamp + gap)`; a record arriving between two
    sessions, close enough to both, merges them (dissertation §5.2.2).

    Args:
        gap: the inactivity that closes a session (> 0).
    """

    gap: float

    def __init__(self, gap: Duration) -> None:
        object.__setattr__(self, "gap", seconds(gap, "gap", allow_zero=False))


class DeterministicWindow(ABC, Generic[S]):
    """A user-defined deterministic window (Cutty, dissertation §5.4.2).

    The runtime calls `on_record` once per record of a key, in event-time order (records of equal
    time in arrival order), once the watermark has passed the record. It returns the new state and
    how many windows begin at this record (the record is their first) and how many end at it (the
    record is the first after them; windows end oldest first). That is all Cutty needs to slice
    the stream and share partial aggregates between overlapping windows (§5.4.3); a window's
    `start` is the time of its first record and its `end` the time of the record that ended it.

    State is explicit so it can be checkpointed with the key: return a new state rather than
    changing the old one, and keep it picklable. Records arriving behind the watermark (late,
    within the allowed lateness) never reach `on_record`: they join the windows whose time span
    holds them.

    Example (a punctuation window: each record with `value["flag"]` closes the current window and
    opens the next):
        >>> class Punctuation(DeterministicWindow[bool]):
        ...     def initial_state(self):
        ...         return False                      # no window open yet
        ...     def on_record(self, state, timestamp, value):
        ...         if value["flag"]:
        ...             return True, 1, 1 if state else 0
        ...         return state, 0, 0
        >>> Punctuation().on_record(False, 1.0, {"flag": True})
        (True, 1, 0)
    """

    @abstractmethod
    def initial_state(self) -> S:
        """The state before a key's first record."""

    @abstractmethod
    def on_record(self, state: S, timestamp: float, value: Any) -> tuple[S, int, int]:
        """`(new state, windows beginning here, windows ending here)` for one record."""

    def describe(self) -> str:
        """A name for errors and results."""
        return type(self).__name__


PeriodicWindow = Tumbling | Sliding
WindowSpec = Tumbling | Sliding | Session | DeterministicWindow[Any]


def check_window(spec: object, name: str) -> WindowSpec:
    """`spec` if it is a window definition; TypeError naming the query otherwise."""
    if isinstance(spec, (Tumbling, Sliding, Session, DeterministicWindow)):
        return spec
    raise TypeError(
        f"window {name!r} must be Tumbling, Sliding, Session or a DeterministicWindow, got {spec!r}"
    )
