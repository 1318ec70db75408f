"""JetStreamSource: NATS JetStream streams as a replayable, partitioned source.

The log-source framework (`connectors.log`) over the JetStream adapter (`client`): a stream, or
each subject of a stream, is a partition; the stream sequence is the cursor in the checkpoint;
new subjects (or streams matching a pattern) are found while the job runs.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import Any

import pyarrow as pa

from ...errors import EpochalError
from ...validation import check_choice
from ..extras import require
from ..log.formats import RecordFormat
from ..log.source import LogSource
from ..log.streams import StreamSelection
from .client import JetStreamClient
from .connection import transient_errors

__all__ = ["JetStreamSource"]

class JetStreamSource(LogSource):
    """The messages of JetStream streams, as Arrow batches, exactly once.

    Args:
        servers: the NATS server URL(s), e.g. `"nats://127.0.0.1:4222"`.
        stream: a stream's name, a list of names, or a pattern (`"clicks-*"`): streams created
            later that match it are found while the job runs.
        format: how a payload becomes a row (`JsonFormat(schema)`, `AvroFormat`, `RawFormat()`).
        partition: `"subject"` (the default): each subject of a stream is a partition, named
            `<stream>/<subject>`, and new subjects are found as messages arrive on them;
            `"stream"`: each stream is one partition.
        subjects: with `partition="subject"`, the subjects to read (a NATS filter such as
            `"clicks.*"`); all of the stream's by default.

    The other options (`start`, `bounded`, `discover`, `group`, `acknowledge`, `metadata`,
    `poll_interval`, `unavailable_timeout`) are the log framework's (`LogSource`). `metadata`'s
    `offset` is the stream sequence, `timestamp` the time the server stored the message, and
    `key` its subject. Acknowledged cursors go to the key-value bucket `EPOCHAL_OFFSETS`.
    """

    def __init__(
        self,
        servers: str | Sequence[str],
        stream: str | Sequence[str],
        format: RecordFormat,
        *,
        partition: str = "subject",
        subjects: str | None = None,
        start: str | float | dt.datetime = "earliest",
        bounded: bool = False,
        discover: float = 5.0,
        group: str | None = None,
        acknowledge: bool = False,
        metadata: Sequence[str] = (),
        poll_interval: float = 0.02,
        unavailable_timeout: float = 60.0,
    ) -> None:
        require("nats", "JetStreamSource")  # one line, before Spark starts, if the extra is missing
        super().__init__(format, start=start, bounded=bounded, discover=discover, group=group,
                         acknowledge=acknowledge, metadata=metadata, poll_interval=poll_interval,
                         unavailable_timeout=unavailable_timeout)
        self.servers = [servers] if isinstance(servers, str) else list(servers)
        if not self.servers:
            raise ValueError("servers: give at least one NATS URL")
        self.streams = StreamSelection.parse("stream", stream, "a name, a list of names or a pattern")
        self.partition = check_choice("partition", partition, ("subject", "stream"))
        if subjects is not None and self.partition != "subject":
            raise ValueError('subjects filters the subjects of partition="subject"')
        self.subjects = subjects

    def describe(self) -> str:
        return f"JetStreamSource({', '.join(self.servers)}, stream {self.streams})"

    def connect(self) -> JetStreamClient:
        return JetStreamClient(self)

    def transient_errors(self) -> tuple[type[BaseException], ...]:
        return transient_errors()

    def column_types(self) -> tuple[pa.DataType, pa.DataType]:
        return pa.int64(), pa.string()

    def check(self) -> None:
        """Fail before the job starts if the server is not there or a named stream is missing."""
        try:
            super().check()
        except EpochalError as exc:
            cause: Any = exc.__cause__
            if type(cause).__name__ == "NotFoundError":
                raise EpochalError(
                    f"{self.describe()}: no such stream (create it first, e.g. `nats stream add`, or "
                    f"`js.add_stream(name=..., subjects=[...])`): {cause}"
                ) from cause
            raise
