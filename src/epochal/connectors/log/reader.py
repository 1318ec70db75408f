"""Reading one partition: a fetcher thread that talks to the log, and the split reader that
hands its records out to the task.

Flink's FLIP-27 source reader splits the work the same way (`SourceReaderBase` on the task's
thread, `SplitFetcher`s on threads of their own, a bounded queue between them): the fetcher
blocks in the log's client (a long poll, a reconnect, a server that is down) and decodes the
payloads into Arrow rows, while `read` never blocks: it takes what the fetcher queued, or
returns nothing for now. At most `_PREFETCH` fetches wait in the queue, so a slow job holds a
bounded amount of the log in memory.

The split's position is the cursor past the last row handed out (`LogPosition`, with the split's
stop in bounded mode, so a restore stops where the first run would have): what the fetcher read
ahead and the task never took is simply read again after a restore. A message that does not
decode is handed out as rejected input once the position passes it (`on_error`), or, without a
policy, fails the job with an error naming the partition, the offset and the message.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

import pyarrow as pa

from ...api.connector import RejectedInput, SplitReader
from ...errors import EpochalError
from .client import Cursor, Fetched, LogClient, LogUnavailable
from .retry import Outage

if TYPE_CHECKING:
    from .source import LogSource

__all__ = ["LogPosition", "LogSplit", "LogSplitReader"]

log = logging.getLogger(__name__)

_PREFETCH = 2  # decoded fetches waiting for the task, at most
_WAIT = 0.5  # seconds a fetch waits for a first record (a long poll): how soon a closing fetcher notices
_SHOWN = 200  # characters of a bad message an error shows


@dataclass(frozen=True, slots=True)
class LogSplit:
    """One partition of a log, read from `start` (a cursor) to `stop` (bounded mode) or forever."""

    split_id: str
    partition: str
    start: Cursor
    stop: Cursor | None = None


class LogPosition(NamedTuple):
    """Where a split's reader stands: the cursor past the last record handed out, and the stop
    the split had when it was first read (None: unbounded)."""

    cursor: Cursor
    stop: Cursor | None


@dataclass(slots=True)
class _Chunk:
    """One fetch, decoded: its rows, their offsets, the messages that did not decode."""

    batch: pa.RecordBatch
    offsets: list[Any]  # of each row
    after: Callable[[Any], Cursor]  # the client's: the cursor past an offset
    rejects: list[tuple[int, RejectedInput]]  # (rows before it, the message)
    cursor: Cursor  # past the whole fetch
    taken: int = 0  # rows handed out


@dataclass(frozen=True, slots=True)
class _Failed:
    error: BaseException


_END = object()  # the split reached its stop


class _Fetcher:
    """The thread that fetches one partition into a bounded queue."""

    def __init__(self, source: LogSource, split: LogSplit, cursor: Cursor, stop: Cursor | None, size: int) -> None:
        self.source, self.split, self.cursor, self.stop, self.size = source, split, cursor, stop, size
        self.queue: queue.Queue[Any] = queue.Queue(_PREFETCH)
        self.closed = threading.Event()
        self.thread = threading.Thread(target=self._run, name=f"epochal-fetch-{split.split_id}", daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.closed.set()
        self.thread.join(timeout=_WAIT * 4)

    def _put(self, item: Any) -> bool:
        while not self.closed.is_set():
            try:
                self.queue.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def _run(self) -> None:
        source, split = self.source, self.split
        outage = Outage(f"{source.describe()}, partition {split.partition!r}", source.unavailable_timeout)
        client: LogClient | None = None
        try:
            while not self.closed.is_set():
                try:
                    if client is None:
                        client = source.connect()
                    if self.stop is not None and client.reached(self.cursor, self.stop):
                        self._put(_END)
                        return
                    fetched = client.fetch(split.partition, self.cursor, self.size, self.stop, _WAIT)
                except (source.transient_errors() + (LogUnavailable, ConnectionError, TimeoutError, OSError)) as exc:
                    wait = outage.failed(exc)  # raises once the server was away too long
                    _close_quietly(client)
                    client = None
                    self.closed.wait(wait)
                    continue
                outage.recovered()
                if fetched.payloads or fetched.cursor != self.cursor:
                    if not self._put(_decode(source, split.partition, fetched, client)):
                        return
                    self.cursor = fetched.cursor
        except BaseException as exc:  # noqa: BLE001 - handed to the task, which fails the attempt
            self._put(_Failed(exc))
        finally:
            _close_quietly(client)


def _close_quietly(client: LogClient | None) -> None:
    if client is not None:
        try:
            client.close()
        except Exception as exc:  # noqa: BLE001 - a connection that is gone anyway
            log.debug("closing a log client: %s", exc)


def _decode(source: LogSource, partition: str, fetched: Fetched, client: LogClient) -> _Chunk:
    """The fetch's rows; the messages the client could not read (`Fetched.errors`) or the format
    could not decode are rejected."""
    unread = fetched.errors or {}
    readable = [i for i in range(len(fetched.payloads)) if i not in unread] if unread else None
    payloads = fetched.payloads if readable is None else [fetched.payloads[i] for i in readable]
    decoded = source.format.decode(payloads)
    bad = dict(unread)
    for j, reason in decoded.bad:
        bad[j if readable is None else readable[j]] = reason
    good = [i for i in range(len(fetched.payloads)) if i not in bad] if bad else range(len(fetched.payloads))
    batch = source.with_metadata(decoded.batch, partition, fetched, good)
    rejects = []
    ordered = sorted(bad.items())
    for kept_before, (i, reason) in zip(_kept_before(ordered), ordered):
        payload = fetched.payloads[i]
        try:
            record: Any = payload.decode("utf-8")
        except UnicodeDecodeError:
            record = payload
        rejects.append((kept_before, RejectedInput(record, reason, {"partition": partition,
                                                                    "offset": fetched.offsets[i]})))
    offsets = fetched.offsets if not bad else [fetched.offsets[i] for i in good]
    return _Chunk(batch, offsets, client.after, rejects, fetched.cursor)


def _kept_before(bad: list[tuple[int, str]]) -> list[int]:
    """For each bad message (by index, in order): how many good ones came before it."""
    return [i - n for n, (i, _) in enumerate(bad)]


@dataclass(slots=True)
class LogSplitReader(SplitReader):
    """Hands out the rows the fetcher of one split queued; never blocks."""

    source: LogSource
    split: LogSplit
    cursor: Cursor
    stop: Cursor | None
    _fetcher: _Fetcher | None = None
    _chunk: _Chunk | None = None
    _ended: bool = False
    _tolerant: bool = False
    _passed: list[RejectedInput] = field(default_factory=list)

    def read(self, max_records: int) -> pa.RecordBatch | list[Any] | None:
        if self._fetcher is None:
            self._fetcher = _Fetcher(self.source, self.split, self.cursor, self.stop, max(1, max_records))
        chunk = self._chunk
        if chunk is None:
            if self._ended:
                return None
            try:
                item = self._fetcher.queue.get_nowait()
            except queue.Empty:
                return []
            if item is _END:
                self._ended = True
                return None
            if isinstance(item, _Failed):
                raise item.error
            chunk = self._chunk = item
            if chunk.rejects and not self._tolerant:
                _, first = chunk.rejects[0]
                raise EpochalError(
                    f"{self.source.describe()}: the message at offset {first.position['offset']} of partition "
                    f"{self.split.partition!r} does not decode ({first.error}): {str(first.record)[:_SHOWN]!r}"
                )
        start = chunk.taken
        end = min(chunk.batch.num_rows, start + max_records)
        rows = chunk.batch.slice(start, end - start)
        chunk.taken = end
        whole = end >= chunk.batch.num_rows
        self.cursor = chunk.cursor if whole else chunk.after(chunk.offsets[end - 1])
        if chunk.rejects:
            passed = [r for before, r in chunk.rejects if whole or before < end]
            chunk.rejects = [] if whole else [(b, r) for b, r in chunk.rejects if b >= end]
            self._passed.extend(passed)
        if whole:
            self._chunk = None
        return rows

    def retry_after(self) -> float:
        return self.source.poll_interval

    def notify_checkpoint_complete(self, checkpoint_id: int, position: Any) -> None:
        """A checkpoint holding `position` completed: acknowledge its cursor (if asked to)."""
        if self.source.acknowledges and isinstance(position, LogPosition):
            self.source.acknowledge(checkpoint_id, {self.split.partition: position.cursor})

    def position(self) -> LogPosition:
        return LogPosition(self.cursor, self.stop)

    def tolerate_bad_input(self) -> None:
        self._tolerant = True

    def rejected(self) -> list[RejectedInput]:
        passed, self._passed = self._passed, []
        return passed

    def close(self) -> None:
        if self._fetcher is not None:
            self._fetcher.close()
            self._fetcher = None
