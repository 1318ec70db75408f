"""A listening port's side of new links, without blocking the event loop that owns the port.

A connection accepted on a worker's data port or on the job master's port is held here until
its peer proved it knows the job's secret (`runtime.wire.handshake`, inside TLS if the job has
it) and sent its first frame, a small HELLO saying who it is; only then does it become a `Link`.
Until then nothing it sends is decoded but the handshake's fixed-size fields; a connection that
fails the handshake, breaks the protocol, or does not finish within the handshake timeout is
closed, and its address logged and counted (`Refusal`). A silent or slow connection therefore
holds no one up: the worker's loop and the job master's loop go on meanwhile.

The `Acceptor` keeps its listener and pending connections in a selector of its own, whose file
descriptor a loop registers in its own selector (epoll and kqueue descriptors can be watched
like sockets): readable means "call `poll`".
"""

from __future__ import annotations

import pickle
import selectors
import socket
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .frames import _HEADER, HELLO
from .handshake import HandshakeRefused, Refusal, Role, ServerHandshake, refusal
from .network import Link

MAX_HELLO_BYTES = 1 << 20  # a HELLO frame (who a peer is) is a few hundred bytes
_CHUNK = 1 << 16


@dataclass(frozen=True, slots=True)
class Accepted:
    """A proven peer: its HELLO (unpickled: the peer is authenticated) and its link."""

    hello: Any
    attempt: int
    link: Link
    address: str


class _Incoming:
    """One accepted connection on its way to a `Link`."""

    def __init__(self, sock: socket.socket, address: str, handshake: ServerHandshake,
                 tls: ssl.SSLContext | None, deadline: float) -> None:
        sock.setblocking(False)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # the challenge must not wait for an ACK
        if tls is not None:
            sock = tls.wrap_socket(sock, server_side=True, do_handshake_on_connect=False)
        self.sock = sock
        self.address = address
        self.deadline = deadline
        self._tls_pending = tls is not None
        self._handshake = handshake
        self._unsent = bytearray()
        self._received = bytearray()  # past the handshake: the HELLO frame, and what follows it

    def fileno(self) -> int:
        return self.sock.fileno()

    def step(self) -> tuple[int, Any, bytes] | None:
        """Go as far as the bytes that came allow: `(attempt, hello, bytes after it)` once done.

        Raises:
            HandshakeRefused: the peer failed the handshake or sent no HELLO first.
            OSError: the connection broke (a TLS handshake that failed, too).
        """
        if self._tls_pending:
            try:
                self.sock.do_handshake()  # type: ignore[attr-defined]
            except (ssl.SSLWantReadError, ssl.SSLWantWriteError):
                return None
            self._tls_pending = False
        ended = False
        while True:
            try:
                chunk = self.sock.recv(_CHUNK)
            except (BlockingIOError, InterruptedError, ssl.SSLWantReadError, ssl.SSLWantWriteError):
                break
            if not chunk:
                ended = True  # what came before the end still counts: the link sees the end next
                break
            if self._handshake.done:
                self._received += chunk
            else:
                self._received += self._handshake.feed(chunk)
                self._unsent += self._handshake.outgoing
                self._handshake.outgoing.clear()
        self._send()
        hello = self._hello() if self._handshake.done else None
        if hello is None and ended:
            done = self._handshake.done
            raise HandshakeRefused("closed before its first frame" if done else "closed before it was done")
        return hello

    def _send(self) -> None:
        while self._unsent:
            try:
                n = self.sock.send(self._unsent)
            except (BlockingIOError, InterruptedError, ssl.SSLWantWriteError, ssl.SSLWantReadError):
                return
            del self._unsent[:n]

    def _hello(self) -> tuple[int, Any, bytes] | None:
        if len(self._received) < _HEADER.size:
            return None
        kind, attempt, _, length = _HEADER.unpack_from(self._received)
        if kind != HELLO or length > MAX_HELLO_BYTES:
            raise HandshakeRefused(f"its first frame is not a hello (kind {kind}, {length} bytes)")
        end = _HEADER.size + length
        if len(self._received) < end:
            return None
        try:
            hello = pickle.loads(self._received[_HEADER.size : end])
        except Exception as exc:  # noqa: BLE001 - an authenticated peer sent garbage: refused all the same
            raise HandshakeRefused(f"an unreadable hello ({type(exc).__name__})") from None
        return attempt, hello, bytes(self._received[end:])

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass


class Acceptor:
    """A listening socket whose connections become links once proven (see the module's docstring).

    Args:
        listener: the bound, listening socket (its owner closes it).
        port: what this port is, in refusals ("job master", "worker 1").
        secret: the job's secret.
        role: this side's role; `client_role`: the only role it accepts.
        on_refused: told of every connection closed without becoming a link.
        tls: the server context, for a job with TLS.
        timeout: seconds a connection has to prove itself and send its HELLO.
        max_frame: the links' largest frame.
    """

    def __init__(
        self, listener: socket.socket, port: str, secret: bytes, role: Role, client_role: Role,
        on_refused: Callable[[Refusal], None], tls: ssl.SSLContext | None = None, timeout: float = 10.0,
        max_frame: int = 1 << 30,
    ) -> None:
        self.listener = listener
        self.port = port
        self._secret = secret
        self._role = role
        self._client_role = client_role
        self._on_refused = on_refused
        self._tls = tls
        self._timeout = timeout
        self._max_frame = max_frame
        self._selector = selectors.DefaultSelector()
        self._pending: dict[int, _Incoming] = {}
        listener.setblocking(False)
        self._selector.register(listener, selectors.EVENT_READ, None)

    def fileno(self) -> int:
        """The descriptor of its selector: readable when a connection or one's bytes wait."""
        return self._selector.fileno()

    @property
    def pending(self) -> int:
        return len(self._pending)

    def due(self, now: float) -> bool:
        """Whether a pending connection's time is up (`poll` closes it)."""
        return any(p.deadline <= now for p in self._pending.values())

    def poll(self, timeout: float = 0.0) -> list[Accepted]:
        """Accept what waits, advance the pending connections, close the overdue; the links made."""
        done: list[Accepted] = []
        for key, _ in self._selector.select(timeout):
            if key.data is None:
                self._accept()
                continue
            incoming: _Incoming = key.data
            try:
                result = incoming.step()
            except (HandshakeRefused, OSError) as exc:
                self._refuse(incoming, str(exc) or type(exc).__name__)
                continue
            if result is not None:
                self._forget(incoming)
                attempt, hello, rest = result
                link = Link(incoming.sock, incoming.address, self._max_frame, rest)
                done.append(Accepted(hello, attempt, link, incoming.address))
        now = time.monotonic()
        for incoming in [p for p in self._pending.values() if p.deadline <= now]:
            self._refuse(incoming, f"not proven within {self._timeout:g} s")
        return done

    def _accept(self) -> None:
        while True:
            try:
                sock, address = self.listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError:  # e.g. too many open files: the next poll tries again
                return
            peer = f"{address[0]}:{address[1]}" if isinstance(address, tuple) else str(address)
            try:
                incoming = _Incoming(sock, peer, ServerHandshake(self._secret, self._role, self._client_role),
                                     self._tls, time.monotonic() + self._timeout)
            except OSError as exc:
                sock.close()
                self._on_refused(refusal(self.port, peer, f"cannot take the connection ({exc})"))
                continue
            self._pending[incoming.fileno()] = incoming
            self._selector.register(incoming, selectors.EVENT_READ, incoming)

    def _forget(self, incoming: _Incoming) -> None:
        self._pending.pop(incoming.fileno(), None)
        try:
            self._selector.unregister(incoming)
        except (KeyError, ValueError):
            pass

    def _refuse(self, incoming: _Incoming, reason: str) -> None:
        self._forget(incoming)
        incoming.close()
        self._on_refused(refusal(self.port, incoming.address, reason))

    def close(self) -> None:
        """Close the pending connections and the selector (not the listener: its owner's)."""
        for incoming in list(self._pending.values()):
            self._forget(incoming)
            incoming.close()
        try:
            self._selector.unregister(self.listener)
        except (KeyError, ValueError):
            pass
        self._selector.close()
