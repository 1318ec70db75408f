"""Who is on the other end of a link: a mutual challenge-response before any frame is decoded.

Every TCP connection between a job's processes (data and backup links between workers, a
worker's link to the job master) begins with this exchange, over the per-job secret the job
master's host makes (`new_secret`) and hands to the workers in the barrier stage's task closure,
which Spark already carries to the executors (authenticated and encrypted with
`spark.authenticate` and `spark.network.crypto.enabled`). It is the scheme of Spark's own
`spark.authenticate` (a shared secret, nonces both ways), in three fixed-size messages:

    client -> server  HELLO      magic | client role | client nonce                  56 bytes
    server -> client  CHALLENGE  magic | server role | server nonce | server proof   88 bytes
    client -> server  PROOF      client proof                                        32 bytes

where each proof is HMAC-SHA256(secret, label | client role | server role | client nonce |
server nonce), the label saying which side made it, so neither side's proof can be reflected or
replayed: each side's nonce is fresh, and the proofs are compared with `hmac.compare_digest`.
The server proves itself first (a worker never sends the job master's link a frame before it
knows it reached the job's own job master), the client's proof is checked before a byte after
it is read as a frame, and nothing of the exchange is unpickled: a peer that fails it is closed,
and its address logged and counted (`Refusal`, `Refusals`). With `TlsConfig` the exchange runs
inside TLS (`runtime.wire.tls`).

`ServerHandshake` is the server's side as a state machine fed with bytes (the event loops of the
workers and the job master accept without blocking: `runtime.wire.incoming`); `secure_client`
is the connecting side, blocking, as connecting is.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import secrets
import socket
import ssl
import threading
import time
from collections import deque
from dataclasses import dataclass
from enum import Enum

log = logging.getLogger(__name__)

MAGIC = b"EPOCHAL\x01"  # the last byte is the protocol's version
NONCE_BYTES = 32
PROOF_BYTES = 32
ROLE_BYTES = 16
HELLO_BYTES = len(MAGIC) + ROLE_BYTES + NONCE_BYTES
CHALLENGE_BYTES = len(MAGIC) + ROLE_BYTES + NONCE_BYTES + PROOF_BYTES
SECRET_BYTES = 32
_CLIENT = b"epochal client proof"
_SERVER = b"epochal server proof"


class Role(Enum):
    """What a process is on a link; each listening port accepts one role of client."""

    WORKER = b"worker"
    JOB_MASTER = b"job master"

    @property
    def wire(self) -> bytes:
        return self.value.ljust(ROLE_BYTES, b"\0")


class HandshakeRefused(ConnectionError):
    """The peer did not prove it knows the job's secret (or spoke something else)."""


def new_secret() -> bytes:
    """A fresh per-job secret (256 random bits)."""
    return secrets.token_bytes(SECRET_BYTES)


def _proof(
    secret: bytes, label: bytes, client: bytes, server: bytes, client_nonce: bytes, server_nonce: bytes
) -> bytes:
    return hmac.new(secret, label + client + server + client_nonce + server_nonce, hashlib.sha256).digest()


class ServerHandshake:
    """The accepting side, fed the bytes it receives; `outgoing` is what to send back.

    Args:
        secret: the job's secret.
        role: this side's role (the port's).
        client_role: the only role this port accepts.
    """

    def __init__(self, secret: bytes, role: Role, client_role: Role) -> None:
        self._secret = secret
        self._role = role.wire
        self._client_role = client_role.wire
        self._buffer = bytearray()
        self._client_nonce = b""
        self._server_nonce = b""
        self.outgoing = bytearray()
        self.done = False

    def feed(self, data: bytes) -> bytes:
        """Take received bytes; returns those past the client's proof (its first frames), once
        done. Raises HandshakeRefused at the first byte that cannot be right."""
        if self.done:
            return data
        self._buffer += data
        if not self._client_nonce:
            if not MAGIC.startswith(bytes(self._buffer[: len(MAGIC)])):
                raise HandshakeRefused("not an Epochal link (no handshake)")
            if len(self._buffer) < HELLO_BYTES:
                return b""
            hello, after = bytes(self._buffer[:HELLO_BYTES]), self._buffer[HELLO_BYTES:]
            role = hello[len(MAGIC) : len(MAGIC) + ROLE_BYTES]
            if role != self._client_role:
                raise HandshakeRefused(f"a client of role {role.rstrip(bytes(1))!r} on a port for "
                                       f"{self._client_role.rstrip(bytes(1))!r}")
            self._client_nonce = hello[len(MAGIC) + ROLE_BYTES :]
            self._server_nonce = secrets.token_bytes(NONCE_BYTES)
            proof = _proof(self._secret, _SERVER, self._client_role, self._role, self._client_nonce, self._server_nonce)
            self.outgoing += MAGIC + self._role + self._server_nonce + proof
            self._buffer = bytearray(after)
        if len(self._buffer) < PROOF_BYTES:
            return b""
        given, rest = bytes(self._buffer[:PROOF_BYTES]), bytes(self._buffer[PROOF_BYTES:])
        want = _proof(self._secret, _CLIENT, self._client_role, self._role, self._client_nonce, self._server_nonce)
        if not hmac.compare_digest(given, want):
            raise HandshakeRefused("wrong proof (not the job's secret, or a replayed handshake)")
        self.done = True
        self._buffer = bytearray()
        return rest


def secure_client(
    sock: socket.socket, secret: bytes, role: Role, server_role: Role, timeout: float,
    tls: ssl.SSLContext | None = None,
) -> socket.socket:
    """Prove this side to the server on `sock` (connected, blocking) and check the server's
    proof; returns the socket to send frames on (TLS-wrapped with `tls`), still blocking.

    Raises:
        HandshakeRefused: the server did not prove it knows the secret.
        OSError: the connection failed or timed out (`ssl.SSLError` for a TLS failure).
    """
    sock.settimeout(timeout)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # the proof and the first frame go at once
    if tls is not None:
        sock = tls.wrap_socket(sock, server_side=False)
    client_nonce = secrets.token_bytes(NONCE_BYTES)
    sock.sendall(MAGIC + role.wire + client_nonce)
    answer = _recv_exact(sock, CHALLENGE_BYTES)
    at = len(MAGIC)
    if answer[:at] != MAGIC or answer[at : at + ROLE_BYTES] != server_role.wire:
        raise HandshakeRefused(f"the server is not an Epochal {server_role.value.decode()}")
    server_nonce = answer[at + ROLE_BYTES : at + ROLE_BYTES + NONCE_BYTES]
    want = _proof(secret, _SERVER, role.wire, server_role.wire, client_nonce, server_nonce)
    if not hmac.compare_digest(answer[at + ROLE_BYTES + NONCE_BYTES :], want):
        raise HandshakeRefused("the server did not prove it knows the job's secret")
    sock.sendall(_proof(secret, _CLIENT, role.wire, server_role.wire, client_nonce, server_nonce))
    return sock


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    data = bytearray()
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise HandshakeRefused("the server closed the connection during the handshake")
        data += chunk
    return bytes(data)


# -- refusals: logged with the peer's address, counted in the job's metrics -------------------------
@dataclass(frozen=True, slots=True)
class Refusal:
    """A connection closed because it did not authenticate (or broke the protocol after)."""

    at: float  # seconds since the epoch
    port: str  # what refused it: "job master", "worker 1 (data)", "control endpoint"
    peer: str  # the connecting address, host:port
    reason: str


REFUSALS_KEPT = 100


class Refusals:
    """The job's refusals: a count and the newest `REFUSALS_KEPT`, shared by the threads that
    refuse (the job master's loop, the control endpoint's handlers). Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.count = 0
        self._by_port: dict[str, int] = {}
        self._recent: deque[Refusal] = deque(maxlen=REFUSALS_KEPT)

    def add(self, refusal: Refusal) -> None:
        log.warning("%s refused a connection from %s: %s", refusal.port, refusal.peer, refusal.reason)
        with self._lock:
            self.count += 1
            self._by_port[refusal.port] = self._by_port.get(refusal.port, 0) + 1
            self._recent.append(refusal)

    def by_port(self) -> dict[str, int]:
        """How many each port refused."""
        with self._lock:
            return dict(self._by_port)

    def recent(self) -> tuple[Refusal, ...]:
        with self._lock:
            return tuple(self._recent)


def refusal(port: str, peer: object, reason: str) -> Refusal:
    """A refusal now; `peer` as `socket.getpeername()` gives it."""
    if isinstance(peer, tuple) and len(peer) >= 2:
        peer = f"{peer[0]}:{peer[1]}"
    return Refusal(time.time(), port, str(peer), reason)
