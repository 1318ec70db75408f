"""The queue of the async I/O operator: requests in flight, in order or as they complete.

After Flink's `OrderedStreamElementQueue` and `UnorderedStreamElementQueue`: an entry per
record, whose result arrives later, and the watermarks that came between records. Ordered, a
result leaves only when every entry before it has. Unordered, results leave as they complete,
but never across a watermark: the watermarks cut the queue into segments, a segment's results
leave in completion order once every segment before it is empty, and a watermark leaves once
the segment before it is (so no result is behind a watermark that overtook it downstream).

Pure data, no asyncio: the operator completes entries from its event loop's callbacks.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from typing import Any


class Entry:
    """One record in flight and, once complete, its result or its error."""

    __slots__ = ("record", "done", "result", "error")

    def __init__(self, record: Any) -> None:
        self.record = record
        self.done = False
        self.result: Any = None
        self.error: BaseException | None = None

    def complete(self, result: Any = None, error: BaseException | None = None) -> None:
        self.result, self.error, self.done = result, error, True


class _Segment:
    """Unordered mode: the entries between two watermarks, and the watermark that closes them."""

    __slots__ = ("pending", "completed", "watermark")

    def __init__(self) -> None:
        self.pending: dict[Entry, None] = {}  # in input order (for snapshots)
        self.completed: list[Entry] = []
        self.watermark: Any = None  # what closes the segment (None: the open, last segment)


class AsyncQueue:
    """Entries and watermarks in flight; `take_ready` hands out what may leave, in order.

    Args:
        ordered: results in input order (else in completion order between watermarks).
    """

    def __init__(self, ordered: bool) -> None:
        self.ordered = ordered
        self.size = 0  # records in the queue, complete or not: what the capacity counts
        self._items: deque[Any] = deque()  # ordered: entries and watermarks, in input order
        self._segments: deque[_Segment] = deque([_Segment()])  # unordered
        self._ready = False

    def __len__(self) -> int:
        return self.size

    def add(self, entry: Entry) -> None:
        """A record went in flight."""
        self.size += 1
        if self.ordered:
            self._items.append(entry)
        else:
            self._segments[-1].pending[entry] = None

    def add_watermark(self, watermark: Any) -> bool:
        """A watermark came after the records in flight: True if it waits in the queue (some
        record before it has not left), False if it may go on at once."""
        if self.size == 0:
            return False
        if self.ordered:
            self._items.append(watermark)
        else:
            last = self._segments[-1]
            if not last.pending and not last.completed:  # nothing between it and the one before
                previous = self._segments[-2] if len(self._segments) > 1 else None
                if previous is None:
                    return False
                previous.watermark = watermark  # a newer watermark replaces the older one
                return True
            last.watermark = watermark
            self._segments.append(_Segment())
        return True

    def completed(self, entry: Entry) -> None:
        """`entry` has its result (or error)."""
        if not self.ordered:
            for segment in self._segments:
                if entry in segment.pending:
                    del segment.pending[entry]
                    segment.completed.append(entry)
                    break
        self._ready = True

    def has_ready(self) -> bool:
        """Whether something may leave now (cheap: set on completion, cleared by `take_ready`)."""
        return self._ready

    def take_ready(self) -> list[Any]:
        """What may leave now, in order: complete entries and (not `Entry`) watermarks."""
        self._ready = False
        out: list[Any] = []
        if self.ordered:
            items = self._items
            while items:
                head = items[0]
                if type(head) is Entry:
                    if not head.done:
                        break
                    self.size -= 1
                out.append(items.popleft())
            return out
        segments = self._segments
        while True:
            first = segments[0]
            if first.completed:
                self.size -= len(first.completed)
                out.extend(first.completed)
                first.completed = []
            if first.pending or first.watermark is None:
                return out
            out.append(first.watermark)
            segments.popleft()

    def records(self) -> Iterator[Any]:
        """The records of every entry still in the queue, in input order (complete or not):
        what a checkpoint keeps, to issue them again on restore (Flink's AsyncWaitOperator)."""
        if self.ordered:
            for item in self._items:
                if type(item) is Entry:
                    yield item.record
            return
        for segment in self._segments:
            entries = [*segment.completed, *segment.pending]
            yield from (e.record for e in entries)
