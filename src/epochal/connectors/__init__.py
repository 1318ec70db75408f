"""Sources and sinks that ship with Epochal."""

from .delta import DeltaSink as DeltaSink
from .delta import DeltaSource as DeltaSource
from .files import FileSink as FileSink
from .files import read_committed as read_committed
from .nexmark import NexmarkSource as NexmarkSource
from .parquet import ParquetSink as ParquetSink
from .parquet_source import ParquetSource as ParquetSource
from .postgres import PostgresCdcSource as PostgresCdcSource
from .postgres import PostgresSink as PostgresSink
from .records import CsvSource as CsvSource
from .records import JsonLinesSource as JsonLinesSource
from .text import TextFileSource as TextFileSource

__all__ = [
    "CsvSource", "DeltaSink", "DeltaSource", "FileSink", "JsonLinesSource", "NexmarkSource", "ParquetSink",
    "ParquetSource", "PostgresCdcSource", "PostgresSink", "TextFileSource", "read_committed",
]
