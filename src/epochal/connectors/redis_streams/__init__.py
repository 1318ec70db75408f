"""Redis Streams: a replayable source (streams as partitions, the entry ID as the checkpointed
cursor) and an exactly-once sink (an epoch and its writer's commit marker in one MULTI/EXEC).

Needs `redis` (`pip install 'epochal[redis]'`); it is imported when a connection is made."""

from .sink import RedisStreamSink as RedisStreamSink
from .source import RedisStreamSource as RedisStreamSource

__all__ = ["RedisStreamSink", "RedisStreamSource"]
