"""The message-log connector framework: a replayable source over a partitioned log (after
Flink's FLIP-27 `KafkaSource`), exactly-once log sinks, and the record formats they share.

An adapter for a new log is a `LogClient` (list partitions, resolve starting cursors, fetch)
and a `LogSource` subclass that connects it; a sink is a `LogSink` with an idempotent
`commit_epoch`. `connectors.jetstream` and `connectors.redis_streams` are the two that ship."""

from .client import Fetched as Fetched
from .client import LogClient as LogClient
from .client import LogUnavailable as LogUnavailable
from .formats import AvroFormat as AvroFormat
from .formats import JsonFormat as JsonFormat
from .formats import RawFormat as RawFormat
from .formats import RecordFormat as RecordFormat
from .reader import LogPosition as LogPosition
from .reader import LogSplit as LogSplit
from .sink import EpochOutput as EpochOutput
from .sink import LogSink as LogSink
from .source import LogSource as LogSource

__all__ = [
    "AvroFormat", "EpochOutput", "Fetched", "JsonFormat", "LogClient", "LogPosition", "LogSink", "LogSource",
    "LogSplit", "LogUnavailable", "RawFormat", "RecordFormat",
]
