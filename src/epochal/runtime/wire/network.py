"""Channels over TCP: framing, multiplexed links, and credit-based flow control.

All channels between two workers share one TCP connection (a `Link`). Each logical channel has
its own credits (dissertation §3.4, flow control, and Flink's credit-based flow control): the consumer
grants `capacity` frames up front and returns credits as its task consumes them; the producer
sends only while it has credit. So a channel blocked by barrier alignment stops only its own
producer, and the connection itself is always drained: no head-of-line deadlock.

Records leave in batches, when a batch is full or after a flush timeout. Arrow batches travel
as Arrow IPC, Python lists as pickle protocol 5, control events (barriers, end-of-input) as
pickle. Every frame carries the sender's *attempt*; frames of an older attempt (before a
restart) are dropped, frames of a newer one wait until the receiver has restarted too.

Copies (issue 36): an Arrow batch is written once into its IPC buffer, which the socket sends
from (no `bytes` of it, no send buffer it is appended to; small frames are gathered into one
write); on the receiving side the socket's bytes are read once, and a frame inside one read is
handed on as a view of it, a frame across reads is read into a buffer of its own size, and the
batch decoded from it references those bytes (`decode_arrow`: no copy). So an Arrow batch costs
one copy to encode and the kernel's two, where it cost six before.

A `Link` is made only once its peer proved it knows the job's secret (`runtime.wire.handshake`),
so what it unpickles comes from a process of the job; a frame's length is checked against the
job's `max_frame_bytes` as soon as its header arrives, before a buffer is allocated for it. A
link may run over TLS (`runtime.wire.tls`): an `ssl.SSLSocket` reads and writes a record at a
time and may hold decrypted bytes the selector does not see, so a TLS link reads until the
socket would block.
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

# kind (1 byte), attempt, channel wire id, payload length
_HEADER = struct.Struct("<BIIQ")

DATA_PICKLE = 1
DATA_ARROW = 2
EVENT = 3
CREDIT = 4
CONTROL = 5
HELLO = 6
BACKUP = 7  # a chained backup's copy or notice between workers (`state.backups`)

_PICKLE = 5
_TLS_WRITE = 1 << 20  # bytes handed to an SSLSocket at once (it takes all of them or none)
_WOULD_BLOCK = (BlockingIOError, InterruptedError, ssl.SSLWantReadError, ssl.SSLWantWriteError)


def encode_frame(kind: int, attempt: int, channel: int, payload: bytes) -> bytes:
    return _HEADER.pack(kind, attempt, channel, len(payload)) + payload


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


class LinkClosed(ConnectionError):
    """The peer closed the connection (or died)."""


class FrameTooLarge(LinkClosed):
    """A frame's header announced more bytes than the link accepts: the link is closed."""


_RECEIVE = 1 << 20  # bytes asked of the socket per read
_GATHER = 64 * 1024  # frames up to this size are gathered into one write with their neighbours


class Link:
    """One non-blocking TCP (or TLS) connection carrying frames both ways.

    Outgoing frames wait as their header and payload buffers (`_out`), never joined into one
    buffer unless small. Incoming bytes are read a chunk at a time; a frame wholly inside a chunk
    is yielded as a view of it, and a frame that runs past its chunk is read into a buffer of its
    own (`_frame`, `_frame_got`), so no byte is copied after the socket read.

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
        self.peer = peer
        self.max_frame = max_frame
        self._tls = isinstance(sock, ssl.SSLSocket)
        self._early = received
        self._out: deque[Any] = deque()  # headers and payloads (bytes-like), in order
        self._head = b""  # the start of a header split across reads
        self._frame: bytearray | None = None  # the payload of a frame split across reads
        self._frame_got = 0
        self._frame_header: tuple[int, int, int] = (0, 0, 0)
        self.closed = False
        self.sent_bytes = 0
        self.received_bytes = 0

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
        frames: list[tuple[int, int, int, Any]] = []
        try:
            if self._early:  # what the handshake read past its end
                early, self._early = self._early, b""
                self._frames(early, frames)
            while self._read(frames):
                pass
        except LinkClosed:
            yield from frames
            raise
        yield from frames

    def _read(self, frames: list[tuple[int, int, int, Any]]) -> bool:
        """One socket read, its frames appended; whether to read again (a full read)."""
        if self._frame is not None:  # a frame's payload runs on: read it into its own buffer
            view = memoryview(self._frame)[self._frame_got:]
            n = self._recv_into(view)
            if n == 0:
                return False
            self._frame_got += n
            if self._frame_got == len(self._frame):
                frames.append((*self._frame_header, memoryview(self._frame)))
                self._frame = None
            return n == len(view) or self._tls
        try:
            chunk = self.sock.recv(_RECEIVE)
        except _WOULD_BLOCK:
            return False
        except OSError as exc:  # ssl.SSLError too: a record that does not decrypt
            self.closed = True
            raise LinkClosed(f"{self.peer}: {exc}") from exc
        if not chunk:
            self.closed = True
            raise LinkClosed(f"{self.peer}: connection closed")
        self.received_bytes += len(chunk)
        self._frames(chunk, frames)
        return len(chunk) == _RECEIVE or self._tls  # TLS: decrypted bytes the selector does not see

    def _recv_into(self, view: memoryview) -> int:
        try:
            n = self.sock.recv_into(view)
        except _WOULD_BLOCK:
            return 0
        except OSError as exc:
            self.closed = True
            raise LinkClosed(f"{self.peer}: {exc}") from exc
        if n == 0:
            self.closed = True
            raise LinkClosed(f"{self.peer}: connection closed")
        self.received_bytes += n
        return n

    def _frames(self, chunk: bytes, frames: list[tuple[int, int, int, Any]]) -> None:
        """Cut one read into frames: views of `chunk`; a frame running past it gets its own buffer."""
        size, offset, end = _HEADER.size, 0, len(chunk)
        view = memoryview(chunk)
        if self._head:  # a header split across reads (rare): complete it from this read
            need = size - len(self._head)
            head, self._head = self._head + chunk[:need], b""
            if len(head) < size:
                self._head = head
                return
            offset = need
            header = _HEADER.unpack(head)
            if not self._payload(header, view, offset, frames):
                return
            offset += header[3]
        while end - offset >= size:
            header = _HEADER.unpack_from(chunk, offset)
            offset += size
            if not self._payload(header, view, offset, frames):
                return
            offset += header[3]
        if offset < end:
            self._head = bytes(chunk[offset:])

    def _payload(self, header: tuple[int, int, int, int], view: memoryview, offset: int,
                 frames: list[tuple[int, int, int, Any]]) -> bool:
        """The payload of the frame whose header was read: a view, if the read holds all of it
        (True), else the start of its own buffer (False: the read is used up)."""
        kind, attempt, channel, length = header
        if length > self.max_frame:  # before anything is allocated for it
            self.close()
            raise FrameTooLarge(f"{self.peer}: a frame of {length} bytes, above the {self.max_frame} accepted")
        available = len(view) - offset
        if length <= available:
            frames.append((kind, attempt, channel, view[offset:offset + length] if length else b""))
            return True
        self._frame = bytearray(length)
        self._frame[:available] = view[offset:]
        self._frame_got = available
        self._frame_header = (kind, attempt, channel)
        return False

    def close(self) -> None:
        self.closed = True
        try:
            self.sock.close()
        except OSError:
            pass


def read_object_blocking(
    sock: socket.socket, timeout: float | None = None, max_bytes: int = DEFAULT_MAX_FRAME_BYTES
) -> tuple[int, Any]:
    """Read one CONTROL or HELLO frame from a blocking socket whose peer is authenticated:
    `(attempt, object)`. The kind and the length are checked before the payload is read."""
    sock.settimeout(timeout)
    header = _recv_exact(sock, _HEADER.size)
    kind, attempt, _, length = _HEADER.unpack(header)
    if kind not in (CONTROL, HELLO):
        raise ConnectionError(f"expected a control frame, got kind {kind}")
    if length > max_bytes:
        raise FrameTooLarge(f"a frame of {length} bytes, above the {max_bytes} accepted")
    payload = _recv_exact(sock, length)
    return attempt, pickle.loads(payload)


def write_object_blocking(sock: socket.socket, message: Any, attempt: int = 0, kind: int = CONTROL) -> None:
    sock.sendall(encode_frame(kind, attempt, 0, pickle.dumps(message, protocol=_PICKLE)))


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    data = bytearray()
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise LinkClosed("connection closed")
        data += chunk
    return bytes(data)


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
