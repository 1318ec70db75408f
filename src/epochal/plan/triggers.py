"""When windows fire, and by which clock: window time domains and triggers, as plan data.

A window operator runs in one time domain (`WindowTime`): event time (records carry their time,
the watermark completes windows: dissertation §5.2.1), processing time (a record's time is the
task's clock when it arrives, and the clock completes windows), or count (a record's time is
its index among its key's records: `count_window(size, slide)`, a window of `size` records
every `slide`, Flink's `countWindow`). All three run on the same shared slices (Cutty, ch. 5):
a count window is a periodic window over record indices.

A trigger says when a window emits (Flink's `Trigger`, restricted to what shared slices allow):

- `EventTimeTrigger()` / `ProcessingTimeTrigger()`: once, when the watermark (the clock) passes
  the window's end (and again for late records within the allowed lateness). The defaults.
- `.with_early_firings(every=s)`: besides, every `s` seconds of processing time, each window
  holding records that changed since emits its current, partial result.
- `CountTrigger(n)`: each time `n` more records entered a window it emits its result so far,
  and never at its end (what is left when the window closes is dropped, as in Flink).
- `.purging()`: a firing empties the window, so the next emits only what came after (Flink's
  `PurgingTrigger`). Slices shared by overlapping windows cannot be emptied for one of them, so
  purging takes one `Tumbling` query.

`check_trigger` refuses, before the job starts, what the slices cannot do.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import Enum
from typing import Any, TypeVar

from .time import Duration, seconds
from .windows import DeterministicWindow, Sliding, Tumbling

TriggerT = TypeVar("TriggerT", bound="Trigger")


class WindowTime(Enum):
    """The time a window operator cuts its windows by."""

    EVENT = "event"  # the records' own times; the watermark completes windows
    PROCESSING = "processing"  # the task's clock when a record arrives; the clock completes windows
    COUNT = "count"  # a record's index among its key's records; windows complete as records come


WINDOW_TIMES = ("event", "processing")


@dataclass(frozen=True, slots=True, kw_only=True)
class Trigger:
    """When a window emits; build one with `EventTimeTrigger()`, `ProcessingTimeTrigger()` or
    `CountTrigger(n)`, then `.with_early_firings(every=...)` and `.purging()`."""

    early_every: float | None = None  # seconds of processing time between early firings
    purge: bool = False  # a firing empties the window

    def with_early_firings(self: TriggerT, every: Duration) -> TriggerT:
        """Also emit each changed window's partial result every `every` seconds (processing time)."""
        return replace(self, early_every=seconds(every, "every", allow_zero=False))

    def purging(self: TriggerT) -> TriggerT:
        """Empty the window at each firing: the next firing emits only what came after."""
        return replace(self, purge=True)

    def describe(self) -> str:
        parts = [type(self).__name__ + "()"]
        if self.early_every is not None:
            parts.append(f"with_early_firings(every={self.early_every})")
        if self.purge:
            parts.append("purging()")
        return ".".join(parts)


@dataclass(frozen=True, slots=True, kw_only=True)
class EventTimeTrigger(Trigger):
    """Fire when the watermark passes the window's end (the default in event time)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ProcessingTimeTrigger(Trigger):
    """Fire when the task's clock passes the window's end (the default in processing time)."""


@dataclass(frozen=True, slots=True)
class CountTrigger(Trigger):
    """Fire a window each time `count` more records entered it; never at its end."""

    count: int

    def __post_init__(self) -> None:
        if isinstance(self.count, bool) or not isinstance(self.count, int) or self.count < 1:
            raise ValueError(f"CountTrigger's count must be a positive int, got {self.count!r}")


def PurgingTrigger(trigger: TriggerT) -> TriggerT:  # noqa: N802 - named as Flink's class
    """`trigger.purging()`: each firing empties the window."""
    if not isinstance(trigger, Trigger):
        raise TypeError(f"PurgingTrigger takes a trigger, got {trigger!r}")
    return trigger.purging()


def one_key(record: Any) -> int:
    """`window_all`'s key selector: every record has the same key (one subtask holds them all)."""
    return 0


def count_window(size: int, slide: int | None = None) -> Sliding | Tumbling:
    """The periodic window over record indices that a count window of `size` records every
    `slide` is: windows end at multiples of `slide` (after every `slide`-th record of a key) and
    hold the last `size` records (fewer at the start), as Flink's `countWindow(size, slide)`."""
    for name, value in (("size", size), ("slide", slide if slide is not None else size)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"count window {name} must be a positive int, got {value!r}")
    if slide is None or slide == size:
        return Tumbling(size)
    return Sliding(size, slide, offset=(-size) % slide)


def check_trigger(trigger: object, time: WindowTime, queries: tuple[tuple[str, Any], ...]) -> Trigger | None:
    """`trigger` if the windows' time and queries allow it; raises ValueError saying why not."""
    if trigger is None:
        return None
    if not isinstance(trigger, Trigger) or type(trigger) is Trigger:
        raise TypeError(f"trigger must be EventTimeTrigger(), ProcessingTimeTrigger() or CountTrigger(n), "
                        f"got {trigger!r}")
    if time is WindowTime.COUNT:
        raise ValueError("count windows fire by count already: they take no trigger")
    if isinstance(trigger, EventTimeTrigger) and time is not WindowTime.EVENT:
        raise ValueError("EventTimeTrigger() fires by the watermark: it needs event-time windows")
    if isinstance(trigger, ProcessingTimeTrigger) and time is not WindowTime.PROCESSING:
        raise ValueError("ProcessingTimeTrigger() fires by the clock: it needs windows in processing time "
                         "(time='processing')")
    specs = [spec for _, spec in queries]
    if isinstance(trigger, CountTrigger) and not all(isinstance(s, (Tumbling, Sliding)) for s in specs):
        raise ValueError("CountTrigger counts the records of each window: it needs Tumbling or Sliding windows")
    if trigger.early_every is not None and any(isinstance(s, DeterministicWindow) for s in specs):
        raise ValueError("early firings need Tumbling, Sliding or Session windows: a user-defined window "
                         "sees its records only once the watermark passed them")
    if trigger.purge and not (len(specs) == 1 and isinstance(specs[0], Tumbling)):
        raise ValueError(f"{trigger.describe()}: purging empties a window's slices, which overlapping windows "
                         "and other queries share; it takes one Tumbling query")
    if isinstance(trigger, CountTrigger) and trigger.early_every is not None:
        raise ValueError("CountTrigger fires by count: it takes no early firings")
    return trigger
