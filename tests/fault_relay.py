"""A fault relay: a TCP relay the tests put between two workers, which can drop, stall or cut
the link (network faults at the socket layer).

This machine's kernel has no queueing disciplines (`tc qdisc add ... netem` fails: "Specified
qdisc kind is unknown"), so `tc netem` cannot delay or drop packets, and Spark's local workers
share one network namespace, so no veth pair can sit between two of them. Workers therefore
connect to their peers through this relay when `EPOCHAL_LINK_RELAY` names it
(`epochal.cluster.relay_hook`): each connection starts with a line naming its link
(`EPOCHAL-RELAY <from> <to> <host>:<port>`), the relay connects to the target and pumps the bytes
both ways, a thread per direction, until told otherwise:

- `drop(link)`: both connections reset (RST), as when a middlebox or a host's stack drops the
  connection mid-stream;
- `stall(link, seconds, direction)`: one direction stops moving: the relay stops reading it, so
  TCP's flow control holds the sender, as a congested or flapping path does;
- `partition(link, seconds)`: both directions stop, then move again (the partition heals): bytes
  sent meanwhile arrive late, none is lost, as TCP over a path that came back.

The relay also records the first bytes each client sent (`recorded`), so a test can replay a real
handshake. It runs in the test's process, on threads, one per direction of each link.
"""

from __future__ import annotations

import socket
import struct
import threading
import time
from dataclasses import dataclass, field


@dataclass
class RelayedLink:
    """One worker-to-worker connection through the relay."""

    source: int
    target: int
    address: tuple[str, int]
    client: socket.socket
    server: socket.socket
    opened: float = field(default_factory=time.monotonic)
    recorded: bytearray = field(default_factory=bytearray)
    paused_until: list[float] = field(default_factory=lambda: [0.0, 0.0])  # per direction: to target, back
    closed: bool = False
    moved: list[int] = field(default_factory=lambda: [0, 0])  # bytes per direction

    def __str__(self) -> str:
        return f"{self.source}->{self.target}"


RECORDED = 4096  # bytes of a client's start kept for replays


class FaultRelay:
    """The relay's listening socket and its links (see the module's docstring)."""

    def __init__(self) -> None:
        self.server = socket.create_server(("127.0.0.1", 0))
        self.address = self.server.getsockname()
        self.links: list[RelayedLink] = []
        self._lock = threading.Lock()
        self._closed = False
        threading.Thread(target=self._accept, name="fault-relay", daemon=True).start()

    @property
    def env(self) -> str:
        return f"{self.address[0]}:{self.address[1]}"

    def live(self) -> list[RelayedLink]:
        with self._lock:
            return [link for link in self.links if not link.closed]

    def wait_for_link(self, timeout: float = 60.0, moved: int = 0) -> RelayedLink:
        """The newest open link, once it carried `moved` bytes each way."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            links = [link for link in self.live() if min(link.moved) >= moved]
            if links:
                return links[-1]
            time.sleep(0.01)
        raise TimeoutError(f"no link through the relay carried {moved} bytes within {timeout} s")

    # -- faults ------------------------------------------------------------------------------------
    def drop(self, link: RelayedLink) -> None:
        """Reset both connections of `link` now."""
        link.closed = True
        for sock in (link.client, link.server):
            try:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # RST, not FIN
                sock.close()
            except OSError:
                pass

    def stall(self, link: RelayedLink, seconds: float, direction: int = 0) -> None:
        """Stop moving one direction of `link` (0: to its target, 1: back) for `seconds`."""
        link.paused_until[direction] = time.monotonic() + seconds

    def partition(self, link: RelayedLink, seconds: float) -> None:
        """Stop both directions of `link` for `seconds`; then it heals."""
        until = time.monotonic() + seconds
        link.paused_until[0] = link.paused_until[1] = until

    def close(self) -> None:
        self._closed = True
        self.server.close()
        for link in self.live():
            self.drop(link)

    # -- pumping -----------------------------------------------------------------------------------
    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self.server.accept()
            except OSError:
                return
            threading.Thread(target=self._open, args=(client,), daemon=True).start()

    def _open(self, client: socket.socket) -> None:
        try:
            line = b""
            while not line.endswith(b"\n") and len(line) < 256:
                chunk = client.recv(1)
                if not chunk:
                    raise OSError("closed before naming its link")
                line += chunk
            _, source, target, where = line.decode().split()
            host, _, port = where.rpartition(":")
            server = socket.create_connection((host, int(port)), timeout=10)
            server.settimeout(None)
        except (OSError, ValueError):
            client.close()
            return
        link = RelayedLink(int(source), int(target), (host, int(port)), client, server)
        with self._lock:
            self.links.append(link)
        threading.Thread(target=self._pump, args=(link, 0), daemon=True).start()
        threading.Thread(target=self._pump, args=(link, 1), daemon=True).start()

    def _pump(self, link: RelayedLink, direction: int) -> None:
        src, dst = (link.client, link.server) if direction == 0 else (link.server, link.client)
        try:
            while not link.closed:
                wait = link.paused_until[direction] - time.monotonic()
                if wait > 0:
                    time.sleep(min(wait, 0.01))  # not reading: the sender's TCP window fills
                    continue
                src.settimeout(0.05)
                try:
                    chunk = src.recv(1 << 16)
                except TimeoutError:
                    continue
                if not chunk:
                    break
                if direction == 0 and len(link.recorded) < RECORDED:
                    link.recorded += chunk[: RECORDED - len(link.recorded)]
                while link.paused_until[direction] > time.monotonic() and not link.closed:
                    time.sleep(0.01)  # a pause that began with this chunk in hand holds it too
                dst.sendall(chunk)
                link.moved[direction] += len(chunk)
        except OSError:
            pass
        finally:
            if not link.closed:  # one side ended: end the other, as the peer's FIN would
                link.closed = True
                for sock in (link.client, link.server):
                    try:
                        sock.shutdown(socket.SHUT_RDWR)
                    except OSError:
                        pass
                    sock.close()
