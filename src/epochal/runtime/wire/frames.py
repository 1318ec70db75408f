"""Frames on a link: the header and kinds, and the reading side of a link (`FrameReader`).

A frame is a header (kind, the sender's attempt, the channel's wire id, the payload's length)
and its payload. Every frame carries the sender's *attempt*: frames of an older attempt (before
a restart) are dropped, frames of a newer one wait until the receiver has restarted too.

Copies (issue 36), the receiving side: the socket's bytes are read once, and a frame inside one
read is handed on as a view of it, a frame across reads is read into a buffer of its own size, so
a batch decoded from it references those bytes (`network.decode_arrow`: no copy).

A reader belongs to a link whose peer proved it knows the job's secret (`runtime.wire.handshake`),
so what is unpickled from its frames comes from a process of the job; a frame's length is checked
against the job's `max_frame_bytes` as soon as its header arrives, before a buffer is allocated
for it. Over TLS (`runtime.wire.tls`) an `ssl.SSLSocket` reads a record at a time and may hold
decrypted bytes the selector does not see, so a TLS reader reads until the socket would block.
"""

from __future__ import annotations

import pickle
import socket
import ssl
import struct
from collections.abc import Callable, Iterator
from typing import Any

from ...config import DEFAULT_MAX_FRAME_BYTES

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
_WOULD_BLOCK = (BlockingIOError, InterruptedError, ssl.SSLWantReadError, ssl.SSLWantWriteError)


def encode_frame(kind: int, attempt: int, channel: int, payload: bytes) -> bytes:
    return _HEADER.pack(kind, attempt, channel, len(payload)) + payload


class LinkClosed(ConnectionError):
    """The peer closed the connection (or died)."""


class FrameTooLarge(LinkClosed):
    """A frame's header announced more bytes than the link accepts: the link is closed."""


_RECEIVE = 1 << 20  # bytes asked of the socket per read


class FrameReader:
    """The receiving half of a link: reads what the socket has and cuts it into frames.

    Incoming bytes are read a chunk at a time; a frame wholly inside a chunk is yielded as a view
    of it, and a frame that runs past its chunk is read into a buffer of its own (`_frame`,
    `_frame_got`), so no byte is copied after the socket read.

    Args:
        sock: the connection, its peer authenticated (non-blocking).
        peer: what the peer is, for messages.
        max_frame: the largest payload accepted, checked at each header.
        received: bytes already read past the handshake (the peer's first frames).
        broken: called when the connection broke, ended, or was closed for a frame too large.
    """

    def __init__(self, sock: socket.socket, peer: str, max_frame: int, received: bytes,
                 broken: Callable[[], None]) -> None:
        self.sock = sock
        self.peer = peer
        self.max_frame = max_frame
        self._broken = broken
        self._tls = isinstance(sock, ssl.SSLSocket)
        self._early = received
        self._head = b""  # the start of a header split across reads
        self._frame: bytearray | None = None  # the payload of a frame split across reads
        self._frame_got = 0
        self._frame_header: tuple[int, int, int] = (0, 0, 0)
        self.received_bytes = 0

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
            self._broken()
            raise LinkClosed(f"{self.peer}: {exc}") from exc
        if not chunk:
            self._broken()
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
            self._broken()
            raise LinkClosed(f"{self.peer}: {exc}") from exc
        if n == 0:
            self._broken()
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
            self._close()
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

    def _close(self) -> None:
        self._broken()
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
