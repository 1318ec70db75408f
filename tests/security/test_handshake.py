"""The links' handshake (`runtime.wire.handshake`) and a port's acceptor (`runtime.wire.incoming`),
against honest and hostile peers, on loopback: nothing a peer without the job's secret sends is
decoded, and a refusal is counted with the peer's address."""

from __future__ import annotations

import os
import pickle
import socket
import ssl
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import hostile
import pytest
from hypothesis import HealthCheck, given, settings

from epochal.config import TlsConfig
from epochal.runtime.wire import tls
from epochal.runtime.wire.handshake import (
    CHALLENGE_BYTES,
    MAGIC,
    HandshakeRefused,
    Refusal,
    Role,
    new_secret,
    secure_client,
)
from epochal.runtime.wire.incoming import Accepted, Acceptor
from epochal.runtime.wire.network import CONTROL, HELLO, FrameTooLarge, Link, encode_frame, write_object_blocking
from epochal.testing import make_test_certificates

SECRET = new_secret()


class Port:
    """A listening port with its acceptor, polled on a thread, collecting links and refusals."""

    def __init__(self, secret: bytes = SECRET, tls_context: ssl.SSLContext | None = None, timeout: float = 2.0,
                 role: Role = Role.WORKER) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.address = self.listener.getsockname()
        self.refused: list[Refusal] = []
        self.accepted: list[Accepted] = []
        self.acceptor = Acceptor(self.listener, "test port", secret, role, Role.WORKER, self.refused.append,
                                 tls_context, timeout, max_frame=1 << 20)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            self.accepted.extend(self.acceptor.poll(0.01))

    def wait(self, what: str, condition: object, timeout: float = 5.0) -> None:
        deadline = time.monotonic() + timeout
        while not condition() and time.monotonic() < deadline:  # type: ignore[operator]
            time.sleep(0.005)
        assert condition(), f"not {what}: accepted {self.accepted}, refused {self.refused}"  # type: ignore[operator]

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        self.acceptor.close()
        self.listener.close()
        for accepted in self.accepted:
            accepted.link.close()


@pytest.fixture
def port() -> Iterator[Port]:
    p = Port()
    yield p
    p.close()


def _connect(address: tuple[str, int], secret: bytes = SECRET, role: Role = Role.WORKER,
             context: ssl.SSLContext | None = None) -> socket.socket:
    return secure_client(socket.create_connection(address), secret, role, Role.WORKER, 2.0, context)


def test_a_client_with_the_secret_becomes_a_link_that_carries_frames_both_ways(port: Port) -> None:
    sock = _connect(port.address)
    write_object_blocking(sock, ("hello", 7), attempt=3, kind=HELLO)
    write_object_blocking(sock, {"then": "a control frame"})  # pipelined right behind the hello
    port.wait("accepted", lambda: port.accepted)
    (accepted,) = port.accepted
    assert (accepted.hello, accepted.attempt) == (("hello", 7), 3)
    assert accepted.address.startswith("127.0.0.1:")
    frames = []
    deadline = time.monotonic() + 2
    while not frames and time.monotonic() < deadline:
        frames = list(accepted.link.receive())
    assert frames == [(CONTROL, 0, 0, pickle.dumps({"then": "a control frame"}, protocol=5))]
    accepted.link.send_object("back")
    accepted.link.flush_blocking()
    sock.settimeout(2)
    header = sock.recv(17)
    assert header[0] == CONTROL and pickle.loads(sock.recv(1024)) == "back"
    assert port.refused == []
    sock.close()


def test_a_client_with_another_secret_is_refused_and_learns_the_server_is_not_its_job(port: Port) -> None:
    with pytest.raises(HandshakeRefused, match="did not prove"):  # the server proves first
        _connect(port.address, secret=new_secret())
    port.wait("refused", lambda: port.refused)
    assert port.accepted == []
    assert port.refused[0].port == "test port" and port.refused[0].peer.startswith("127.0.0.1:")


def test_a_server_with_another_secret_is_refused_by_the_client() -> None:
    other = Port(secret=new_secret())
    try:
        with pytest.raises(HandshakeRefused):
            _connect(other.address)
        other.wait("refused", lambda: other.refused)
    finally:
        other.close()


def test_a_client_of_the_wrong_role_is_refused(port: Port) -> None:
    with pytest.raises(HandshakeRefused):
        _connect(port.address, role=Role.JOB_MASTER)
    port.wait("refused", lambda: port.refused)
    assert "role" in port.refused[0].reason


def _record_client(address: tuple[str, int]) -> bytes:
    """An honest client's bytes (its HELLO, its proof, its first frame), as a network tap sees them."""
    sent = bytearray()

    class Tap(socket.socket):
        def sendall(self, data: bytes, *args: object) -> None:  # type: ignore[override]
            sent.extend(data)
            super().sendall(data, *args)  # type: ignore[arg-type]

    sock = Tap(socket.AF_INET, socket.SOCK_STREAM)
    sock.connect(address)
    secure_client(sock, SECRET, Role.WORKER, Role.WORKER, 2.0)
    write_object_blocking(sock, "first", kind=HELLO)
    sock.close()
    return bytes(sent)


def test_a_replayed_handshake_is_refused(port: Port) -> None:
    recorded = _record_client(port.address)
    port.wait("the honest one accepted", lambda: port.accepted)
    answer = hostile.send(port.address, recorded, linger=0.3)  # the same bytes, a new connection
    assert answer == b"" or (answer[: len(MAGIC)] == MAGIC and len(answer) == CHALLENGE_BYTES)  # then closed
    port.wait("refused", lambda: port.refused)
    assert len(port.accepted) == 1 and "wrong proof" in port.refused[0].reason


def test_the_servers_proof_reflected_back_is_refused(port: Port) -> None:
    with socket.create_connection(port.address, timeout=2) as sock:
        sock.sendall(MAGIC + Role.WORKER.wire + os.urandom(32))
        challenge = b""
        while len(challenge) < CHALLENGE_BYTES:
            challenge += sock.recv(CHALLENGE_BYTES - len(challenge))
        sock.sendall(challenge[-32:])  # the server's proof, as the client's
        port.wait("refused", lambda: port.refused)
    assert port.accepted == []


@pytest.mark.parametrize("linger", [False, True])
def test_a_truncated_handshake_is_refused_at_its_end_or_at_the_timeout(linger: bool) -> None:
    port = Port(timeout=0.3)
    try:
        sock = socket.create_connection(port.address)
        sock.sendall((MAGIC + Role.WORKER.wire)[:13])
        if not linger:
            sock.close()
        port.wait("refused", lambda: port.refused)
        assert ("within" in port.refused[0].reason) == linger
        sock.close()
    finally:
        port.close()


def test_a_silent_connection_does_not_hold_up_the_next_one() -> None:
    port = Port(timeout=5.0)
    try:
        silent = socket.create_connection(port.address)
        sock = _connect(port.address)
        write_object_blocking(sock, "me", kind=HELLO)
        port.wait("accepted", lambda: port.accepted, timeout=2.0)
        silent.close()
        sock.close()
    finally:
        port.close()


def test_a_valid_frame_without_the_handshake_is_refused_unread(port: Port, tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    for frame in hostile.evil_frames(str(marker)):
        hostile.send(port.address, frame)
    port.wait("all refused", lambda: len(port.refused) == len(hostile.evil_frames(str(marker))))
    assert port.accepted == [] and not marker.exists()


def test_an_authenticated_peers_first_frame_must_be_a_small_hello(port: Port, tmp_path: Path) -> None:
    sock = _connect(port.address)
    sock.sendall(encode_frame(CONTROL, 0, 0, b"x"))
    port.wait("refused", lambda: port.refused)
    assert "not a hello" in port.refused[0].reason
    sock.close()
    sock = _connect(port.address)
    sock.sendall(encode_frame(HELLO, 0, 0, b"")[:9] + (2**40).to_bytes(8, "little"))  # an oversized hello
    port.wait("refused", lambda: len(port.refused) == 2)
    sock.close()


def test_a_link_refuses_an_oversized_frame_at_its_header() -> None:
    with socket.create_server(("127.0.0.1", 0)) as server:
        a = socket.create_connection(server.getsockname())
        b, _ = server.accept()
    link = Link(b, "peer", max_frame=1 << 16)
    oversized = encode_frame(CONTROL, 0, 0, b"")[:9] + (2**62).to_bytes(8, "little")
    a.sendall(encode_frame(CONTROL, 0, 0, b"fine") + oversized)
    time.sleep(0.05)
    frames = []
    with pytest.raises(FrameTooLarge, match="above the 65536"):
        for frame in link.receive():
            frames.append(frame)
    assert frames == [(CONTROL, 0, 0, b"fine")] and link.closed
    a.close()


@pytest.fixture(scope="module")
def garbage_port() -> Iterator[Port]:
    p = Port(timeout=0.5)
    yield p
    p.close()


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=hostile.frames("/nonexistent/never"))
def test_whatever_a_stranger_sends_is_refused_and_never_unpickled(garbage_port: Port, data: bytes,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    loads = pickle.loads

    def no_unpickling(payload: bytes, *args: object, **kwargs: object) -> object:
        raise AssertionError(f"unpickled {payload[:40]!r} from a stranger")

    monkeypatch.setattr(pickle, "loads", no_unpickling)
    try:
        before = len(garbage_port.refused)
        hostile.send(garbage_port.address, data, linger=0.0)
        garbage_port.wait("refused", lambda: len(garbage_port.refused) > before, timeout=3.0)
        assert garbage_port.accepted == []
    finally:
        monkeypatch.setattr(pickle, "loads", loads)


# -- TLS ------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def certificates(tmp_path_factory: pytest.TempPathFactory) -> TlsConfig:
    try:
        return make_test_certificates(tmp_path_factory.mktemp("tls"))
    except RuntimeError as exc:
        pytest.skip(str(exc))


def test_tls_links_need_a_certificate_of_the_authority_and_the_secret(
    certificates: TlsConfig, tmp_path: Path
) -> None:
    port = Port(tls_context=tls.server_context(certificates))
    try:
        sock = _connect(port.address, context=tls.client_context(certificates))
        assert isinstance(sock, ssl.SSLSocket) and sock.version() in ("TLSv1.2", "TLSv1.3")
        write_object_blocking(sock, "over tls", kind=HELLO)
        write_object_blocking(sock, "then this")
        port.wait("accepted", lambda: port.accepted)
        link = port.accepted[0].link
        got: list[tuple[int, int, int, bytes]] = []
        deadline = time.monotonic() + 2
        while not got and time.monotonic() < deadline:
            got = list(link.receive())
        assert [pickle.loads(f[3]) for f in got] == ["then this"]
        big = os.urandom(3 << 20)  # more than one TLS record, more than one socket buffer
        link.send_frame(CONTROL, 0, 0, big)
        sock.settimeout(5)
        received = bytearray()
        while len(received) < 17 + len(big):
            link.flush()
            try:
                received += sock.recv(1 << 20)
            except TimeoutError:
                break
        assert bytes(received[17:]) == big
        sock.close()
        # plain TCP to a TLS port, another authority's certificate, the right certificate and a wrong secret
        with pytest.raises(OSError):
            _connect(port.address)
        other = make_test_certificates(tmp_path / "other")
        with pytest.raises(ssl.SSLError):
            _connect(port.address, context=tls.client_context(other))
        with pytest.raises(HandshakeRefused):
            _connect(port.address, secret=new_secret(), context=tls.client_context(certificates))
        port.wait("three refused", lambda: len(port.refused) == 3)
        assert len(port.accepted) == 1
    finally:
        port.close()
