"""Sources and sinks that ship with Epochal."""

from .files import FileSink as FileSink
from .files import read_committed as read_committed
from .text import TextFileSource as TextFileSource

__all__ = ["FileSink", "TextFileSource", "read_committed"]
