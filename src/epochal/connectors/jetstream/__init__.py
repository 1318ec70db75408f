"""NATS JetStream: a replayable source (streams or subjects as partitions, the stream sequence
as the checkpointed cursor) and an exactly-once sink (message ids and commit markers).

Needs `nats-py` (`pip install 'epochal[nats]'`); it is imported when a connection is made."""

from .sink import JetStreamSink as JetStreamSink
from .source import JetStreamSource as JetStreamSource

__all__ = ["JetStreamSink", "JetStreamSource"]
