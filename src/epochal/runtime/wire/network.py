"""Channels over TCP: multiplexed links, and credit-based flow control.

All channels between two workers share one TCP connection (a `Link`). Each logical channel has
its own credits (dissertation §3.4, flow control, and Flink's credit-based flow control): the consumer
grants `capacity` frames up front and returns credits as its task consumes them; the producer
sends only while it has credit. So a channel blocked by barrier alignment stops only its own
producer, and the connection itself is always drained: no head-of-line deadlock.

Records leave in batches, when a batch is full or after a flush timeout. Arrow batches travel
as Arrow IPC, Python lists as pickle protocol 5, control events (barriers, end-of-input) as
pickle, each in a frame (`runtime.wire.frames`: the header, and the reading side of a link).

Copies (issue 36): an Arrow batch is written once into its IPC buffer, which the socket sends
from (no `bytes` of it, no send buffer it is appended to; small frames are gathered into one
write); on the receiving side the socket's bytes are read once (`FrameReader`), and the batch
decoded from a frame references those bytes (`decode_arrow`: no copy). So an Arrow batch costs
one copy to encode and the kernel's two, where it cost six before.

A `Link` is made only once its peer proved it knows the job's secret (`runtime.wire.handshake`).
A link may run over TLS (`runtime.wire.tls`): an `ssl.SSLSocket` writes a record at a time, so a
TLS write offers at most `_TLS_WRITE` bytes, and a retried write at least what it offered before.
"""

from __future__ import annotations

import pickle
import socket
import ssl
import struct
import time
from collections import deque
from collections.abc import Callable, Iterator
from typing import Any

import pyarrow as pa

from ...config import DEFAULT_MAX_FRAME_BYTES
from .batches import batch_len
from .channel import ChannelWatch, take_priority_barrier
from .elements import Barrier, Element
from .frames import (
    _HEADER,
    _PICKLE,
    _WOULD_BLOCK,
    BACKUP,
    CONTROL,
    CREDIT,
    DATA_ARROW,
    DATA_PICKLE,
    EVENT,
    HELLO,
    FrameReader,
    FrameTooLarge,
    LinkClosed,
    encode_frame,
    read_object_blocking,
    write_object_blocking,
)

__all__ = [  # the frames' names too, where the links' users have always found them
    "BACKUP", "CONTROL", "CREDIT", "DATA_ARROW", "DATA_PICKLE", "EVENT", "HELLO", "FrameHandler", "FrameTooLarge",
    "Link", "LinkClosed", "RemoteInputChannel", "RemoteOutputChannel", "decode_arrow", "encode_arrow",
    "encode_frame", "parse_credit", "read_object_blocking", "write_object_blocking",
]


def encode_arrow(batch: pa.RecordBatch) -> pa.Buffer:
    """The IPC stream of one batch, as the Arrow buffer it was written to (sent from as it is)."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batch.schema) as writer:
        writer.write_batch(batch)
    return sink.getvalue()


def decode_arrow(payload: Any) -> pa.RecordBatch:
    """The batch of an IPC stream in any bytes-like payload; its columns reference the payload."""
    with pa.ipc.open_stream(pa.py_buffer(payload)) as reader:
        return reader.read_next_batch()


_TLS_WRITE = 1 << 20  # bytes handed to an SSLSocket at once (it takes all of them or none)
_GATHER = 64 * 1024  # frames up to this size are gathered into one write with their neighbours


class Link:
    """One non-blocking TCP (or TLS) connection carrying frames both ways.

    Outgoing frames wait as their header and payload buffers (`_out`), never joined into one
    buffer unless small. Incoming frames are cut by its `FrameReader`, without a copy.

    Args:
        sock: the connection, its peer authenticated.
        peer: what the peer is, for messages.
        max_frame: the largest payload accepted, checked at each header.
        received: bytes already read past the handshake (the peer's first frames).
    """

    def __init__(
        self, sock: socket.socket, peer: str = "", max_frame: int = DEFAULT_MAX_FRAME_BYTES, received: bytes = b""
    ) -> None:
        sock.setblocking(False)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock = sock
        self._reader = FrameReader(sock, peer, max_frame, received, self._broke)
        self._tls = isinstance(sock, ssl.SSLSocket)
        self._out: deque[Any] = deque()  # headers and payloads (bytes-like), in order
        self.closed = False
        self.sent_bytes = 0

    @property
    def peer(self) -> str:
        """What the peer is, for messages (named anew once its HELLO says who it is)."""
        return self._reader.peer

    @peer.setter
    def peer(self, name: str) -> None:
        self._reader.peer = name

    @property
    def received_bytes(self) -> int:
        return self._reader.received_bytes

    def _broke(self) -> None:
        self.closed = True

    def fileno(self) -> int:
        return self.sock.fileno()

    def send_frame(self, kind: int, attempt: int, channel: int, payload: Any) -> None:
        """Queue a frame; `payload` is any bytes-like object (an Arrow buffer too), not copied."""
        size = payload.nbytes if isinstance(payload, memoryview) else len(payload)
        self._out.append(_HEADER.pack(kind, attempt, channel, size))
        if size:
            self._out.append(payload)

    def send_object(self, message: Any, attempt: int = 0) -> None:
        self.send_frame(CONTROL, attempt, 0, pickle.dumps(message, protocol=_PICKLE))

    @property
    def wants_write(self) -> bool:
        return bool(self._out)

    def _next_write(self) -> Any:
        """The next bytes to write: a large payload as it is, or small pieces gathered."""
        out = self._out
        first = out[0]
        if len(first) >= _GATHER or len(out) == 1:
            return first
        gathered = bytearray()
        while out and len(out[0]) < _GATHER and len(gathered) < _GATHER:
            gathered += out.popleft()
        out.appendleft(gathered)
        return gathered

    def flush(self) -> None:
        """Send as much as the socket takes now."""
        out = self._out
        while out:
            data = self._next_write()
            try:
                if self._tls:  # a retried write offers at least the bytes it offered before: it must
                    with memoryview(data) as view, view[:_TLS_WRITE] as part:
                        n = self.sock.send(part)
                else:
                    n = self.sock.send(data)
            except _WOULD_BLOCK:
                return
            except OSError as exc:
                self.closed = True
                raise LinkClosed(f"{self.peer}: {exc}") from exc
            self.sent_bytes += n
            if n >= len(data):
                out.popleft()
            else:
                out[0] = memoryview(data)[n:]
                if not self._tls:  # the socket is full (a TLS write took a record: go on)
                    return

    def flush_blocking(self, timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        while self._out and time.monotonic() < deadline:
            self.flush()
            if self._out:
                time.sleep(0.001)

    def receive(self) -> Iterator[tuple[int, int, int, Any]]:
        """Read what is available; yield complete frames `(kind, attempt, channel, payload)`,
        the payload a bytes-like view (`bytes` for an empty one).

        Raises:
            LinkClosed: the peer closed the link or broke it.
            FrameTooLarge: a header announced a frame above `max_frame` (the link is closed).
        """
        return self._reader.receive()

    def close(self) -> None:
        self.closed = True
        try:
            self.sock.close()
        except OSError:
            pass


class RemoteOutputChannel:
    """The producer's end of a channel to another worker: buffers, frames, spends credit.

    Args:
        link: the connection to the consumer's worker.
        wire_id: the channel's index in `wiring.channel_keys`, the same on both sides.
        capacity: initial credit, in frames: how far the producer may run ahead.
        batch_size: records buffered before a batch leaves regardless of the timeout.
        flush_interval: seconds a buffered record may wait before it leaves.
    """

    def __init__(
        self,
        link: Link,
        wire_id: int,
        attempt: int,
        capacity: int,
        batch_size: int,
        flush_interval: float,
        elastic: bool = False,
    ) -> None:
        self.link = link
        self.elastic = elastic  # a loop's back-edge: never held back (see runtime.wire.channel)
        self.wire_id = wire_id
        self.attempt = attempt
        self.credits = capacity
        self.batch_size = batch_size
        self.flush_interval = flush_interval
        self._buffer: list[Any] = []
        self._rows = 0
        self._since = 0.0
        self.watch = ChannelWatch()  # the producer's gate learns when credit runs out and returns

    def has_capacity(self) -> bool:
        return self.elastic or self.credits > 0

    def send(self, element: Element) -> None:
        if type(element) is list or isinstance(element, pa.RecordBatch):
            if self._buffer and not _same_shape(self._buffer[0], element):
                self.flush()  # one frame holds one kind of batch (and one Arrow schema)
            if not self._buffer:
                self._since = time.monotonic()
            self._buffer.append(element)
            self._rows += batch_len(element)
            if self._rows >= self.batch_size:
                self.flush()
        else:
            self.flush()
            self._frame(EVENT, pickle.dumps(element, protocol=_PICKLE))

    def flush(self) -> None:
        """Send what is buffered as one batch."""
        if not self._buffer:
            return
        parts, self._buffer, self._rows = self._buffer, [], 0
        if isinstance(parts[0], pa.RecordBatch):
            if len(parts) == 1:
                batch = parts[0]
            else:
                batch = pa.Table.from_batches(parts).combine_chunks().to_batches()[0]
            self._frame(DATA_ARROW, encode_arrow(batch))
        else:
            records = parts[0] if len(parts) == 1 else [r for p in parts for r in p]
            self._frame(DATA_PICKLE, pickle.dumps(records, protocol=_PICKLE))

    def flush_if_due(self, now: float) -> None:
        if self._buffer and now - self._since >= self.flush_interval:
            self.flush()

    def _frame(self, kind: int, payload: bytes) -> None:
        self.link.send_frame(kind, self.attempt, self.wire_id, payload)
        self.credits -= 1
        if self.credits == 0 and not self.elastic:
            self.watch.filled()

    def grant(self, credits: int) -> None:
        had = self.credits
        self.credits += credits
        if had <= 0 < self.credits and not self.elastic:
            self.watch.freed()


class RemoteInputChannel:
    """The consumer's end of a channel from another worker: a queue that returns credit."""

    def __init__(self, link: Link, wire_id: int, attempt: int, capacity: int) -> None:
        self.link = link
        self.wire_id = wire_id
        self.attempt = attempt
        self._queue: deque[Element] = deque()
        self._consumed = 0
        self._threshold = max(1, capacity // 2)
        self.priority = 0  # unaligned barriers queued (see `runtime.wire.channel`)
        self.watch = ChannelWatch()  # the consumer's gate learns of each arrival

    def deliver(self, kind: int, payload: Any) -> None:
        if kind == DATA_ARROW:
            self._queue.append(decode_arrow(payload))
        elif kind == EVENT:
            event = pickle.loads(payload)
            if type(event) is Barrier and event.overtakes:
                self.priority += 1
            self._queue.append(event)
        else:
            self._queue.append(pickle.loads(payload))
        self.watch.arrived()

    def poll(self) -> Element | None:
        if not self._queue:
            return None
        element = self._queue.popleft()
        self._consume()
        return element

    def take_priority_barrier(self) -> tuple[list[Element], Barrier]:
        """Take the first unaligned barrier out of the queue, with copies of what is ahead of it."""
        self.priority -= 1
        ahead, barrier = take_priority_barrier(self._queue)
        self._consume()  # its frame spent a credit too
        return ahead, barrier

    def _consume(self) -> None:
        self._consumed += 1
        if self._consumed >= self._threshold:
            self.link.send_frame(CREDIT, self.attempt, self.wire_id, struct.pack("<I", self._consumed))
            self._consumed = 0

    def peek(self) -> Element | None:
        """The element `poll` would return next, left in place (no credit is returned)."""
        return self._queue[0] if self._queue else None

    def __len__(self) -> int:
        return len(self._queue)

    def __bool__(self) -> bool:
        return bool(self._queue)


def _same_shape(a: Any, b: Any) -> bool:
    if type(a) is list:
        return type(b) is list
    return isinstance(b, pa.RecordBatch) and a.schema.equals(b.schema)


def parse_credit(payload: bytes) -> int:
    return struct.unpack("<I", payload)[0]


FrameHandler = Callable[[int, int, int, Any], None]
