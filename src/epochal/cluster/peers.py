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
  worker whose new peer is still starting keeps answering the job master meanwhile;
- every link starts with the job's handshake (`runtime.wire.handshake`): the connecting side
  proves itself and checks the accepting side's proof before it sends its `PeerHello`; the
  accepting side (`runtime.wire.incoming`) reads nothing else from a connection until it did, and
  refuses what fails (logged, and reported to the job master, which counts it).
"""

from __future__ import annotations

import logging
import os
import selectors
import socket
import time
from collections.abc import Sequence
from dataclasses import dataclass

from ..runtime.wire.handshake import HandshakeRefused, Refusal, Role, secure_client
from ..runtime.wire.incoming import Accepted, Acceptor
from ..runtime.wire.network import HELLO, Link, write_object_blocking
from .link_guard import LinkGuard
from .relay_hook import connect_via_relay

log = logging.getLogger(__name__)

LISTENER = "listener"  # the selector key's data for the listening socket (its `Acceptor`)


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
        guard: LinkGuard,
    ) -> None:
        self.index = index
        self.workers = workers
        self.launch = launch
        self.incarnation = incarnation
        self.listener = listener
        self.addresses = list(addresses)
        self.selector = selector
        self.guard = guard
        self.refused: list[Refusal] = []  # to report to the job master (`Worker`)
        self.acceptor = Acceptor(
            listener, f"worker {index}", guard.secret, Role.WORKER, Role.WORKER, self.refused.append,
            guard.server_tls(), guard.timeout, guard.max_frame,
        )
        self.links: dict[int, Link] = {}
        self._between: dict[int, tuple[int, int]] = {}  # peer → (our incarnation, its) when made
        self._known = [0] * workers  # the newest incarnation of each worker heard of

    # -- the launch's mesh -----------------------------------------------------------------------
    def connect_all(self, timeout: float = 60.0) -> None:
        """At launch (every worker's first incarnation): connect to the higher indexes, accept
        the lower ones, then keep listening for the links of later incarnations."""
        for peer in range(self.index + 1, self.workers):
            self._connect(peer, expects=0, timeout=timeout)
        deadline = time.monotonic() + timeout
        while len(self.links) < self.workers - 1:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"worker {self.index}: the lower workers did not link within {timeout:g} s")
            for accepted in self.acceptor.poll(min(left, 0.5)):
                self._admit(accepted)
        self.listen()

    def listen(self) -> None:
        """Accept links in the event loop from now on."""
        self.selector.register(self.acceptor, selectors.EVENT_READ, LISTENER)

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
                self._connect(peer, expects=incarnations[peer], timeout=self.guard.timeout)

    def accept(self) -> None:
        """Advance the connections waiting on the listener (the loop saw its acceptor readable,
        or a pending connection's time is up)."""
        for accepted in self.acceptor.poll(0.0):
            self._admit(accepted)

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
        try:
            self.selector.unregister(self.acceptor)
        except (KeyError, ValueError):
            pass
        self.acceptor.close()

    # -- helpers ---------------------------------------------------------------------------------
    def incarnation_of(self, peer: int) -> int:
        """The incarnation of `peer` the link to it was made with (0: none made)."""
        return self._between.get(peer, (0, 0))[1]

    def _good(self, peer: int, incarnations: Sequence[int]) -> bool:
        link = self.links.get(peer)
        if link is None or link.closed:
            return False
        if not incarnations:
            return True
        return self._between.get(peer) == (incarnations[self.index], incarnations[peer])

    def _connect(self, peer: int, expects: int, timeout: float) -> None:
        guard = self.guard
        try:
            sock = connect_via_relay(self.index, peer, self.addresses[peer], timeout)
            sock = secure_client(sock, guard.secret, Role.WORKER, Role.WORKER, timeout, guard.client_tls())
            hello = PeerHello(self.index, self.launch, self.incarnation, expects, os.getpid())
            write_object_blocking(sock, hello, kind=HELLO)
        except HandshakeRefused as exc:  # not worker `peer` of this job on that port
            log.warning("worker %d: refused worker %d's port %s: %s", self.index, peer, self.addresses[peer], exc)
            return
        except OSError as exc:  # its whole task is gone: the stage fails, and is relaunched
            log.warning("worker %d: cannot reach worker %d (%s)", self.index, peer, exc)
            return
        self._install(peer, Link(sock, f"worker {peer}", guard.max_frame), expects)

    def _admit(self, accepted: Accepted) -> None:
        hello, link = accepted.hello, accepted.link
        stale = (
            not isinstance(hello, PeerHello)
            or not 0 <= hello.worker < self.workers
            or hello.launch != self.launch
            or hello.expects != self.incarnation
            or hello.incarnation < self._known[hello.worker]
        )
        if stale:  # e.g. sent to a dead incarnation of this worker, and left in the backlog
            link.close()
            return
        self._known[hello.worker] = hello.incarnation
        self.drop(hello.worker)
        link.peer = f"worker {hello.worker}"
        self._install(hello.worker, link, hello.incarnation)

    def _install(self, peer: int, link: Link, incarnation: int) -> None:
        self.links[peer] = link
        self._between[peer] = (self.incarnation, incarnation)
        self.selector.register(link, selectors.EVENT_READ, peer)
