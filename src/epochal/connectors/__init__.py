"""Sources and sinks that ship with Epochal."""

from .files import FileSink as FileSink
from .files import read_committed as read_committed
from .nexmark import NexmarkSource as NexmarkSource
from .text import TextFileSource as TextFileSource

__all__ = ["FileSink", "NexmarkSource", "TextFileSource", "read_committed"]
