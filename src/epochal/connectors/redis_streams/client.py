"""The Redis Streams adapter of the log-source framework: each stream a partition, the entry ID
as the cursor.

The cursor is the ID of the last entry read, as a pair `(milliseconds, sequence)` (IDs order as
such pairs), and a read asks for the entries after it: `XREAD ... STREAMS key <id>` (blocking up
to the fetch's wait, a long poll), or `XRANGE key (<id> <stop>` in bounded mode. `(0, 0)` is the
earliest cursor. An entry's payload is one of its fields (`field`, `"data"` by default); an
entry without that field is rejected like a payload that does not decode.

Acknowledged cursors go where Redis keeps a consumer group's progress: `XGROUP SETID <key>
<group> <id>` (the group is created at the first acknowledgement), so `XINFO GROUPS` shows its
lag; `start="committed"` reads the group's `last-delivered-id` back. Entries are never claimed
through the group: the checkpoint holds the positions.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ..log.client import Fetched, LogClient

if TYPE_CHECKING:
    from .source import RedisStreamSource

__all__ = ["RedisStreamClient", "connect", "format_id", "parse_id", "transient_errors"]

EntryId = tuple[int, int]
_TOP = (1 << 64) - 1  # the largest sequence part of an ID


def parse_id(value: bytes | str) -> EntryId:
    text = value.decode() if isinstance(value, bytes) else value
    ms, _, seq = text.partition("-")
    return int(ms), int(seq or 0)


def format_id(cursor: EntryId) -> str:
    return f"{cursor[0]}-{cursor[1]}"


def transient_errors() -> tuple[type[BaseException], ...]:
    """redis-py's errors that mean the server cannot serve now (down, restarting, loading)."""
    import redis.exceptions as rx

    return (rx.ConnectionError, rx.TimeoutError, rx.BusyLoadingError, ConnectionError, TimeoutError, OSError)


def connect(url: str, wait: float = 0.0) -> Any:
    """A redis-py client of `url`, with timeouts that outlast a blocking read of `wait` seconds."""
    import redis

    return redis.Redis.from_url(url, socket_timeout=wait + 5.0, socket_connect_timeout=2.0,
                                retry_on_timeout=False)


class RedisStreamClient(LogClient):
    """A connection to one Redis server for one `RedisStreamSource`."""

    def __init__(self, source: RedisStreamSource) -> None:
        self.source = source
        self.redis = connect(source.url, wait=1.0)
        self.field = source.field.encode()

    def partitions(self) -> list[str]:
        source = self.source
        self.redis.ping()  # named streams need no listing: this says the server is there
        if not source.streams.has_pattern:
            return list(source.streams.entries)
        found: set[str] = set()
        for pattern in source.streams.entries:
            found.update(k.decode() for k in self.redis.scan_iter(match=pattern, count=1000, _type="stream"))
        return sorted(found)

    def earliest(self, partition: str) -> EntryId:
        return (0, 0)

    def latest(self, partition: str) -> EntryId:
        import redis.exceptions as rx

        try:
            info = self.redis.xinfo_stream(partition)
        except rx.ResponseError:  # no such key (yet): everything to come is after (0, 0)
            return (0, 0)
        return parse_id(info["last-generated-id"])

    def at_time(self, partition: str, seconds: float) -> EntryId:
        ms = int(seconds * 1000)
        return (ms - 1, _TOP) if ms > 0 else (0, 0)

    def committed(self, partition: str, group: str) -> EntryId | None:
        import redis.exceptions as rx

        try:
            groups = self.redis.xinfo_groups(partition)
        except rx.ResponseError:
            return None
        for info in groups:
            name = info["name"].decode() if isinstance(info["name"], bytes) else info["name"]
            if name == group:
                return parse_id(info["last-delivered-id"])
        return None

    def acknowledge(self, group: str, cursors: Mapping[str, Any]) -> None:
        import redis.exceptions as rx

        for partition, cursor in cursors.items():
            entry_id = format_id(cursor)
            try:
                self.redis.xgroup_setid(partition, group, entry_id)
            except rx.ResponseError as exc:
                if "NOGROUP" not in str(exc):
                    raise
                self.redis.xgroup_create(partition, group, entry_id, mkstream=True)

    def after(self, offset: Any) -> EntryId:
        return parse_id(offset)

    def fetch(self, partition: str, cursor: Any, max_records: int, stop: Any | None, wait: float) -> Fetched:
        cursor = tuple(cursor)
        if stop is not None:  # bounded: what there is up to the stop, at once
            entries = self.redis.xrange(partition, f"({format_id(cursor)}", format_id(stop), count=max_records)
            if not entries:
                return Fetched(cursor=tuple(stop))
        else:
            reply = self.redis.xread({partition: format_id(cursor)}, count=max_records, block=max(1, int(wait * 1000)))
            entries = reply[0][1] if reply else []
        out = Fetched(cursor=cursor)
        field = self.field
        errors: dict[int, str] = {}
        for i, (entry_id, fields) in enumerate(entries):
            payload = fields.get(field)
            if payload is None:
                names = sorted(k.decode() for k in fields)
                errors[i] = f"the entry has no field {self.source.field!r} (fields: {names})"
                payload = b" ".join(k + b"=" + v for k, v in fields.items())
            text = entry_id.decode()
            out.payloads.append(payload)
            out.offsets.append(text)
            out.timestamps.append(int(text.partition("-")[0]) / 1000.0)
        if entries:
            out.cursor = parse_id(entries[-1][0])
        out.errors = errors or None
        return out

    def close(self) -> None:
        self.redis.close()
