"""A worker's links to its peers, kept whole while peers' processes come and go.

Each Spark task supervises its worker process (`cluster.supervisor`): a worker that dies is
replaced by a new process, its *incarnation* one higher, holding the same listening socket, so
the address its peers learnt from the job master (`Peers`) stays right. A link is made between
two incarnations, and is good for an attempt only while both are the ones the job master's
`Start` names; the others are remade before the worker builds that attempt's channels:

- the lower worker index connects, the higher accepts, as at launch;
- the connecting side says which incarnation it is and which one it expects to reach
  (`PeerHello`), so a connection that waited in a dead incarnation's backlog is refused by the
  next one instead of being taken for a fresh link;
- accepting happens in the worker's event loop (the listener stays in its selector), so a
  worker whose new peer is still starting keeps answering the job master meanwhile.
"""

from __future__ import annotations

import logging
import os
import selectors
import socket
from collections.abc import Sequence
from dataclasses import dataclass

from ..runtime.wire.network import HELLO, Link, LinkClosed, read_object_blocking, write_object_blocking

log = logging.getLogger(__name__)

LISTENER = "listener"  # the selector key's data for the listening socket
_HANDSHAKE_TIMEOUT = 10.0


@dataclass(frozen=True, slots=True)
class PeerHello:
    """The first frame on a link between workers: who connects, and to which incarnation."""

    worker: int
    launch: int
    incarnation: int
    expects: int  # the incarnation of the accepting worker this link is for
    pid: int = 0


class PeerLinks:
    """This worker's links to every other worker of the launch, by worker index."""

    def __init__(
        self,
        index: int,
        workers: int,
        launch: int,
        incarnation: int,
        listener: socket.socket,
        addresses: Sequence[tuple[str, int]],
        selector: selectors.BaseSelector,
    ) -> None:
        self.index = index
        self.workers = workers
        self.launch = launch
        self.incarnation = incarnation
        self.listener = listener
        self.addresses = list(addresses)
        self.selector = selector
        self.links: dict[int, Link] = {}
        self._between: dict[int, tuple[int, int]] = {}  # peer → (our incarnation, its) when made
        self._known = [0] * workers  # the newest incarnation of each worker heard of

    # -- the launch's mesh -----------------------------------------------------------------------
    def connect_all(self, timeout: float = 60.0) -> None:
        """At launch (every worker's first incarnation): connect to the higher indexes, accept
        the lower ones, then keep listening for the links of later incarnations."""
        for peer in range(self.index + 1, self.workers):
            self._connect(peer, expects=0, timeout=timeout)
        self.listener.settimeout(timeout)
        while len(self.links) < self.workers - 1:
            sock, _ = self.listener.accept()
            self._handshake(sock)
        self.listen()

    def listen(self) -> None:
        """Accept links in the event loop from now on."""
        self.listener.setblocking(False)
        self.selector.register(self.listener, selectors.EVENT_READ, LISTENER)

    # -- an attempt's links ----------------------------------------------------------------------
    def ready(self, incarnations: Sequence[int]) -> bool:
        """Whether every link joins the incarnations an attempt names (none named: every link is
        open)."""
        return all(self._good(peer, incarnations) for peer in range(self.workers) if peer != self.index)

    def repair(self, incarnations: Sequence[int]) -> None:
        """Close the links that do not join `incarnations` and connect anew where this worker is
        the lower index; the higher index's side arrives through `accept`."""
        for peer, incarnation in enumerate(incarnations):
            self._known[peer] = max(self._known[peer], incarnation)
        for peer in range(self.workers):
            if peer == self.index or self._good(peer, incarnations):
                continue
            self.drop(peer)
            if self.index < peer:
                self._connect(peer, expects=incarnations[peer], timeout=_HANDSHAKE_TIMEOUT)

    def accept(self) -> None:
        """Take the connections waiting on the listener (the loop saw it readable)."""
        while True:
            try:
                sock, _ = self.listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            self._handshake(sock)

    def drop(self, peer: int) -> None:
        link = self.links.pop(peer, None)
        self._between.pop(peer, None)
        if link is None:
            return
        try:
            self.selector.unregister(link)
        except (KeyError, ValueError):
            pass
        link.close()

    def close(self) -> None:
        for peer in list(self.links):
            self.drop(peer)

    # -- helpers ---------------------------------------------------------------------------------
    def _good(self, peer: int, incarnations: Sequence[int]) -> bool:
        link = self.links.get(peer)
        if link is None or link.closed:
            return False
        if not incarnations:
            return True
        return self._between.get(peer) == (incarnations[self.index], incarnations[peer])

    def _connect(self, peer: int, expects: int, timeout: float) -> None:
        try:
            sock = socket.create_connection(self.addresses[peer], timeout=timeout)
            hello = PeerHello(self.index, self.launch, self.incarnation, expects, os.getpid())
            write_object_blocking(sock, hello, kind=HELLO)
        except OSError as exc:  # its whole task is gone: the stage fails, and is relaunched
            log.warning("worker %d: cannot reach worker %d (%s)", self.index, peer, exc)
            return
        self._install(peer, sock, expects)

    def _handshake(self, sock: socket.socket) -> None:
        try:
            _, hello = read_object_blocking(sock, timeout=_HANDSHAKE_TIMEOUT)
        except (OSError, LinkClosed):
            sock.close()
            return
        stale = (
            not isinstance(hello, PeerHello)
            or hello.launch != self.launch
            or hello.expects != self.incarnation
            or hello.incarnation < self._known[hello.worker]
        )
        if stale:  # e.g. sent to a dead incarnation of this worker, and left in the backlog
            sock.close()
            return
        self._known[hello.worker] = hello.incarnation
        self.drop(hello.worker)
        self._install(hello.worker, sock, hello.incarnation)

    def _install(self, peer: int, sock: socket.socket, incarnation: int) -> None:
        link = Link(sock, f"worker {peer}")
        self.links[peer] = link
        self._between[peer] = (self.incarnation, incarnation)
        self.selector.register(link, selectors.EVENT_READ, peer)
