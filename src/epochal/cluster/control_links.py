"""The job master's control links to a stage's workers, one per worker process.

Every worker process of a launch opens its control link on the job master's port
(`cluster.master_port`) and says `Hello`. The links are kept here by worker index, with the
incarnation of each worker's process (its supervisor replaces a killed one, `cluster.supervisor`)
and the address its task listens on for its peers: once every worker said hello, each learns all
the addresses (`Peers`, the rendezvous), and a replaced process learns them again. This type
sends, receives and closes; what a closed link means (a lost worker, a failed stage) the stage
host decides (`cluster.stage_host`).
"""

from __future__ import annotations

import pickle
import selectors
from collections.abc import Iterator
from typing import Any

from ..runtime.wire.handshake import Refusals
from ..runtime.wire.network import CONTROL, Link, LinkClosed
from .link_guard import LinkGuard
from .master_port import MasterPort
from .protocol import Hello, PeerLost, Peers, Rejoin, Start, Stop


class ControlLinks:
    """The port the workers connect to, their control links by worker, and their incarnations."""

    def __init__(self, host: str, workers: int, guard: LinkGuard, refusals: Refusals) -> None:
        self.workers = workers
        self.port = MasterPort(host, workers, guard, refusals)
        self.address = self.port.address  # what the workers are told to connect to
        self.selector = selectors.DefaultSelector()
        self.links: dict[int, Link] = {}
        self.addresses: dict[int, tuple[str, int]] = {}  # where each worker's task listens (`Peers`)
        self.incarnations = [0] * workers  # of each worker's process in this launch

    # -- hellos ----------------------------------------------------------------------------------
    def reset(self) -> None:
        """A new launch: close every link; no worker has said hello yet."""
        for link in self.links.values():
            self._drop(link)
        self.links, self.addresses = {}, {}
        self.incarnations = [0] * self.workers

    def next_hello(self, launch: int, timeout: float) -> tuple[Hello, Link] | None:
        """A worker process's hello of `launch`, if one is here or comes within `timeout`."""
        return self.port.next_hello(launch, timeout)

    def replaces(self, hello: Hello) -> bool:
        """Whether `hello` comes from a newer process of its worker than the one linked."""
        return hello.incarnation > self.incarnations[hello.worker]

    def add(self, hello: Hello, link: Link) -> bool:
        """Keep `link` as the worker's control link; True when it completed the rendezvous (every
        worker's address known for the first time: each was sent them all)."""
        old = self.links.pop(hello.worker, None)
        if old is not None:
            self._drop(old)
        self.links[hello.worker] = link
        self.incarnations[hello.worker] = hello.incarnation
        self.selector.register(link, selectors.EVENT_READ, hello.worker)
        if hello.address is None:
            return False
        known = len(self.addresses) == self.workers  # all were: a replaced process
        self.addresses[hello.worker] = hello.address
        if len(self.addresses) < self.workers:
            return False
        peers = Peers(tuple(self.addresses[w] for w in range(self.workers)))  # everyone learns everyone
        for worker in [hello.worker] if known else list(self.links):
            try:
                self.links[worker].send_object(peers)
                self.links[worker].flush_blocking(5.0)
            except LinkClosed:  # died since its hello: its replacement says hello again
                pass
        return not known

    def accept(self) -> None:
        """Take and advance connections now (while an attempt runs)."""
        self.port.poll()

    def listening_status(self) -> tuple[tuple[str, str], ...]:
        return self.port.listening_status()

    # -- what the workers hold ---------------------------------------------------------------------
    def linked(self) -> set[int]:
        return set(self.links)

    def has(self, workers: set[int]) -> bool:
        return all(w in self.links for w in workers)

    def incarnation_of(self, worker: int) -> int:
        return self.incarnations[worker]

    # -- sending ---------------------------------------------------------------------------------
    def send(self, worker: int, message: Any) -> None:
        link = self.links.get(worker)
        if link is not None:
            link.send_object(message)

    def start(self, attempt: int, checkpoint: int | None, job: bytes | None = None, routing: Any = None,
              replay: Any = None) -> None:
        """Every worker starts `attempt`, its processes named by their incarnations."""
        start = Start(attempt, checkpoint, job, tuple(self.incarnations), routing, replay)
        for link in self.links.values():
            link.send_object(start)

    def tell_lost(self, lost: set[int]) -> None:
        """Tell the workers still linked that `lost` died (`PeerLost`): they run on."""
        for worker, link in self.links.items():
            if worker not in lost and not link.closed:
                for dead in sorted(lost):
                    link.send_object(PeerLost(dead))

    def rejoin(self, lost: set[int], attempt: int, checkpoint_id: int) -> None:
        """The new processes of `lost` restore `checkpoint_id`; the others link to them (`Rejoin`)."""
        incarnations = tuple(self.incarnations)
        for worker, link in self.links.items():
            if worker in lost:
                link.send_object(Start(attempt, checkpoint_id, None, incarnations))
            else:
                for dead in sorted(lost):
                    link.send_object(Rejoin(dead, attempt, checkpoint_id, incarnations))

    def flush(self) -> tuple[int, LinkClosed] | None:
        """Write what waits on every link; the first worker whose link closed, and why, if one did."""
        for worker, link in list(self.links.items()):
            try:
                link.flush()
            except LinkClosed as exc:
                return worker, exc
        return None

    # -- receiving -------------------------------------------------------------------------------
    def receive(self, timeout: float) -> Iterator[tuple[int, list[Any] | LinkClosed]]:
        """The control messages of each link with frames within `timeout`, by worker; a link found
        closed ends it (its worker and why)."""
        for key, _ in self.selector.select(timeout):
            ready: Link = key.fileobj  # type: ignore[assignment]
            try:
                frames = list(ready.receive())
            except LinkClosed as exc:
                yield key.data, exc
                return
            yield key.data, [pickle.loads(payload) for kind, _, _, payload in frames if kind == CONTROL]

    def closed(self) -> set[int]:
        """The workers whose control link closed (what they sent meanwhile is stale: dropped)."""
        closed = {w for w, link in self.links.items() if link.closed}
        for key, _ in self.selector.select(0):
            try:
                for _ in key.fileobj.receive():  # type: ignore[union-attr]
                    pass
            except LinkClosed:
                closed.add(key.data)
        return closed

    def drop_closed(self, workers: set[int]) -> None:
        for worker in workers:
            if worker in self.links and self.links[worker].closed:
                self._drop(self.links.pop(worker))

    # -- stopping --------------------------------------------------------------------------------
    def stop(self) -> None:
        """Tell every worker to leave."""
        for link in self.links.values():
            try:
                link.send_object(Stop())
                link.flush_blocking(5.0)
            except LinkClosed:
                pass

    def drop_all(self) -> None:
        for link in self.links.values():
            self._drop(link)
        self.links = {}

    def close(self) -> None:
        self.port.close()

    def _drop(self, link: Link) -> None:
        try:
            self.selector.unregister(link)
        except (KeyError, ValueError):
            pass
        link.close()
