"""RedisStreamSource: Redis streams as a replayable, partitioned source.

The log-source framework (`connectors.log`) over the Redis adapter (`client`): each stream key
is a partition, the last entry ID read is the cursor in the checkpoint, and streams whose keys
match a pattern are found while the job runs.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence

import pyarrow as pa

from ...validation import check_name
from ..extras import require
from ..log.formats import RecordFormat
from ..log.source import LogSource
from ..log.streams import StreamSelection
from .client import RedisStreamClient, transient_errors

__all__ = ["RedisStreamSource"]

class RedisStreamSource(LogSource):
    """The entries of Redis streams, as Arrow batches, exactly once.

    Args:
        url: the server, e.g. `"redis://127.0.0.1:6379/0"`.
        streams: a stream key, a list of keys, or a glob pattern (`"clicks:*"`): streams
            created later whose keys match it are found while the job runs (`SCAN ... TYPE
            stream`). A named stream that does not exist yet is read once it does.
        format: how a payload becomes a row (`JsonFormat(schema)`, `AvroFormat`, `RawFormat()`).
        field: the entry's field that holds the payload.

    The other options (`start`, `bounded`, `discover`, `group`, `acknowledge`, `metadata`,
    `poll_interval`, `unavailable_timeout`) are the log framework's (`LogSource`). `metadata`'s
    `offset` is the entry ID (`"1700000000000-0"`), `timestamp` its milliseconds part; entries
    have no key. `start` at a time means entry IDs at or after its millisecond (IDs the server
    made are times). Acknowledged cursors are the `group`'s last-delivered ID (`XGROUP SETID`).
    """

    def __init__(
        self,
        url: str,
        streams: str | Sequence[str],
        format: RecordFormat,
        *,
        field: str = "data",
        start: str | float | dt.datetime = "earliest",
        bounded: bool = False,
        discover: float = 5.0,
        group: str | None = None,
        acknowledge: bool = False,
        metadata: Sequence[str] = (),
        poll_interval: float = 0.02,
        unavailable_timeout: float = 60.0,
    ) -> None:
        require("redis", "RedisStreamSource")  # one line, before Spark starts, if the extra is missing
        super().__init__(format, start=start, bounded=bounded, discover=discover, group=group,
                         acknowledge=acknowledge, metadata=metadata, poll_interval=poll_interval,
                         unavailable_timeout=unavailable_timeout)
        if not isinstance(url, str) or not url.startswith(("redis://", "rediss://", "unix://")):
            raise ValueError(f"url: a redis:// URL, got {url!r}")
        self.url = url
        self.streams = StreamSelection.parse("streams", streams, "a key, a list of keys or a pattern")
        self.field = check_name("field", field)

    def describe(self) -> str:
        return f"RedisStreamSource({self.url}, {self.streams})"

    def connect(self) -> RedisStreamClient:
        return RedisStreamClient(self)

    def transient_errors(self) -> tuple[type[BaseException], ...]:
        return transient_errors()

    def column_types(self) -> tuple[pa.DataType, pa.DataType]:
        return pa.string(), pa.string()
