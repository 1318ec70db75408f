"""What a message log must offer the log-source framework: the adapter contract.

A log is a set of *partitions*, each an ordered, durable, replayable sequence of messages that
an *offset* addresses (a Kafka partition and its offsets, a JetStream subject or stream and its
stream sequence, a Redis stream and its entry IDs). The framework (`LogSource`) does the rest:
splits, positions in checkpoints, discovery, starting points, bounds, acknowledgements, retries
and decoding. An adapter is a `LogClient`, made by its source's `connect()` in the process that
uses it (a connection cannot travel to a Spark worker), with blocking calls: the framework calls
`fetch` from a fetcher thread of its own, as Flink's `SplitFetcher` runs a `SplitReader`
(FLIP-27), so a slow or unreachable server never blocks the task's thread.

*Cursors* are where a read starts, picklable and ordered within a partition (an int, a tuple):
reading from cursor `c` returns the records at or after it, and every fetched record moves the
cursor past it (`after`). A split's checkpointed position is a cursor, so a restore rereads
exactly the records after the checkpoint (dissertation §3.4: a source's state is an offset into
a durable, sequenced log).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Fetched", "LogClient", "LogUnavailable"]

Cursor = Any


class LogUnavailable(Exception):
    """The log's server cannot be reached (or does not answer) now; the caller retries."""


@dataclass(slots=True)
class Fetched:
    """Records of one partition, in log order, and the cursor past them.

    `cursor` may lie beyond the last record's `after` (a filtered read that skipped records of
    other partitions), never before it.
    """

    payloads: list[bytes] = field(default_factory=list)
    offsets: list[Any] = field(default_factory=list)  # each record's own offset (its `offset` column)
    timestamps: list[float] = field(default_factory=list)  # the log's time of each record, seconds since the epoch
    cursor: Cursor = None
    keys: list[Any] | None = None  # each record's key, where the log has keys
    errors: dict[int, str] | None = None  # records the client could not read (by index): rejected, with why


class LogClient(ABC):
    """A connection to one log, as the framework uses it (every call may block; none is async).

    Raise `LogUnavailable` (or a connection error the source names in `transient_errors`) when
    the server cannot be reached: the framework retries until its `unavailable_timeout`.
    """

    @abstractmethod
    def partitions(self) -> list[str]:
        """The partitions there are now, by a name stable across runs."""

    @abstractmethod
    def earliest(self, partition: str) -> Cursor:
        """The cursor of the oldest record still in the partition."""

    @abstractmethod
    def latest(self, partition: str) -> Cursor:
        """The cursor past the newest record: a read from it sees only records appended later."""

    @abstractmethod
    def at_time(self, partition: str, seconds: float) -> Cursor:
        """The cursor of the first record the log stamped at or after `seconds` (the latest
        cursor if there is none)."""

    def committed(self, partition: str, group: str) -> Cursor | None:
        """The cursor `acknowledge` stored for `group` (None: none stored)."""
        return None

    def acknowledge(self, group: str, cursors: Mapping[str, Cursor]) -> None:  # noqa: B027 - optional
        """Store `cursors` (by partition) as `group`'s progress, where the log keeps such
        things, for monitoring tools (consumer lag); never read back for recovery."""

    @abstractmethod
    def fetch(self, partition: str, cursor: Cursor, max_records: int, stop: Cursor | None, wait: float) -> Fetched:
        """Up to `max_records` records from `cursor` on, none at or past `stop`; waits up to
        `wait` seconds for the first one (then returns what there is, possibly nothing)."""

    @abstractmethod
    def after(self, offset: Any) -> Cursor:
        """The cursor just past the record at `offset`."""

    def reached(self, cursor: Cursor, stop: Cursor) -> bool:
        """Whether a read from `cursor` has nothing left before `stop`."""
        return bool(cursor >= stop)

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release the connection."""
