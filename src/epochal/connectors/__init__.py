"""Sources and sinks that ship with Epochal."""

from .delta import DeltaSink as DeltaSink
from .files import FileSink as FileSink
from .files import read_committed as read_committed
from .nexmark import NexmarkSource as NexmarkSource
from .parquet import ParquetSink as ParquetSink
from .text import TextFileSource as TextFileSource

__all__ = ["DeltaSink", "FileSink", "NexmarkSource", "ParquetSink", "TextFileSource", "read_committed"]
