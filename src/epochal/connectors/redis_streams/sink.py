"""RedisStreamSink: records appended to Redis streams exactly once, an epoch per transaction.

The log sinks' two-phase epoch commit (`connectors.log.sink`, dissertation §4.1.3 and §4.1.4):
an epoch's entries wait, encoded, in the checkpoint until it completes. The commit then runs
one MULTI/EXEC that appends them (`XADD`) and sets the writer's last committed checkpoint (a key
`<prefix>:<writer>`), under `WATCH` of that key: a commit finds the key at or above its
checkpoint and is skipped, or appends the epoch and moves the key in the same transaction, so a
repeated commit (after a failure, or by a zombie of an earlier attempt racing the new one) never
appends twice. Readers see an epoch's entries of one writer all at once or not at all.

An epoch is one transaction: Redis runs it without interleaving other commands, so a very large
epoch (hundreds of thousands of entries) holds other clients up for as long as it takes to
append (tens of milliseconds per 100,000 entries).
"""

from __future__ import annotations

from typing import Any

from ...errors import EpochalError
from ...validation import check_int, check_name
from ..extras import require
from ..log.formats import RecordFormat
from ..log.sink import EpochOutput, LogSink, Target
from .client import connect, transient_errors

__all__ = ["RedisStreamSink"]


class RedisStreamSink(LogSink):
    """Appends records to Redis streams, exactly once per checkpoint.

    Args:
        url: the server, e.g. `"redis://127.0.0.1:6379/0"`.
        stream: the stream key of every entry, or a function of the record that returns it.
        format: how a record becomes the payload (`JsonFormat(schema)`: a JSON object per
            record, `AvroFormat`, `RawFormat()`).
        field: the entry's field that holds the payload.
        maxlen: trim each stream to about this many entries (`XADD MAXLEN ~`); None: never.
        name: the sink's name in its writers' ids.
        prefix: the keys of the writers' commit markers: `<prefix>:<writer id>`.
        unavailable_timeout: seconds a commit waits for a server that is down before the job
            fails (and restarts from its latest checkpoint, which commits again).
    """

    def __init__(
        self,
        url: str,
        stream: Target,
        format: RecordFormat,
        *,
        field: str = "data",
        maxlen: int | None = None,
        name: str = "epochal",
        prefix: str = "epochal:commits",
        unavailable_timeout: float = 60.0,
    ) -> None:
        require("redis", "RedisStreamSink")  # one line, before Spark starts, if the extra is missing
        super().__init__(format, stream, name=name, unavailable_timeout=unavailable_timeout)
        if not isinstance(url, str) or not url.startswith(("redis://", "rediss://", "unix://")):
            raise ValueError(f"url: a redis:// URL, got {url!r}")
        self.url = url
        self.field = check_name("field", field)
        self.maxlen = None if maxlen is None else check_int("maxlen", maxlen)
        self.prefix = check_name("prefix", prefix)
        self._redis: Any = None

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_redis": None}

    def describe(self) -> str:
        stream = self.target if isinstance(self.target, str) else "<per record>"
        return f"RedisStreamSink({self.url}, {stream})"

    def transient_errors(self) -> tuple[type[BaseException], ...]:
        return transient_errors()

    def _client(self) -> Any:
        if self._redis is None:
            self._redis = connect(self.url)
        return self._redis

    def reset(self) -> None:
        client, self._redis = self._redis, None
        if client is not None:
            client.close()

    def check(self, resuming: bool) -> None:
        """Fail before the job starts if the server cannot be reached."""
        try:
            self._client().ping()
        except Exception as exc:
            raise EpochalError(f"{self.describe()}: cannot reach the server: {type(exc).__name__}: {exc}") from exc
        finally:
            self.reset()

    def marker(self, writer: str) -> str:
        """The key that holds `writer`'s last committed checkpoint."""
        return f"{self.prefix}:{writer}"

    def commit_epoch(self, epoch: EpochOutput) -> None:
        import redis.exceptions as rx

        marker = self.marker(epoch.writer)
        field = self.field.encode()
        maxlen, approximate = (self.maxlen, True) if self.maxlen is not None else (None, False)
        with self._client().pipeline(transaction=True) as pipe:
            while True:
                try:
                    pipe.watch(marker)
                    done = pipe.get(marker)
                    if done is not None and int(done) >= epoch.checkpoint_id:
                        pipe.unwatch()
                        return  # committed before: a repeat after a failure
                    pipe.multi()
                    for i, payload in enumerate(epoch.payloads):
                        pipe.xadd(epoch.target(i), {field: payload}, maxlen=maxlen, approximate=approximate)
                    pipe.set(marker, epoch.checkpoint_id)
                    pipe.execute()
                    return
                except rx.WatchError:
                    continue  # another committer of this writer moved the marker: look again
