"""A worker's control link to the job master (on the Spark driver or Connect client).

The worker connects, proves it knows the job's secret (`cluster.link_guard`), says `Hello` and
waits for every peer's address (`Peers`, sent once every worker said hello); from then on the
link carries the job master's `Start`, `Stop` and `ToTask` one way and the worker's reports and
its tasks' messages (`FromTask`) the other. Tasks, and the snapshot thread acknowledging their
checkpoints, put their messages in an outbox that the worker's loop drains onto the link, as
only the loop writes to it. A worker that cannot connect (refused, or not within
`link_guard.CONNECT_TIMEOUT`) fails its Spark task with `JobMasterUnreachable`.
"""

from __future__ import annotations

import queue
from collections.abc import Callable, Iterator
from typing import Any

from ..runtime.wire.network import HELLO, Link, read_object_blocking, write_object_blocking
from .link_guard import LinkGuard
from .protocol import FromTask, Hello, Peers

RENDEZVOUS_TIMEOUT = 300.0  # seconds a worker waits for the others' addresses (the job master's wait)


class DriverLink:
    """The link to the job master, once connected, and the outbox of the tasks' messages."""

    def __init__(self, address: tuple[str, int], guard: LinkGuard) -> None:
        self.address = address
        self.guard = guard
        self.link: Link | None = None
        self.outbox: queue.SimpleQueue[Any] = queue.SimpleQueue()

    def connect(self, hello: Hello) -> tuple[Link, list[tuple[str, int]]]:
        """Connect and say `hello`: the link, and every worker's address once all said theirs."""
        sock = self.guard.connect_to_job_master(self.address, hello.worker)
        sock.settimeout(RENDEZVOUS_TIMEOUT)
        write_object_blocking(sock, hello, kind=HELLO)
        _, peers = read_object_blocking(sock, RENDEZVOUS_TIMEOUT, self.guard.max_frame)  # once all said hello
        if not isinstance(peers, Peers):
            raise ConnectionError(f"the job master answered {type(peers).__name__}, not the peers' addresses")
        sock.settimeout(60)
        self.link = Link(sock, "driver", self.guard.max_frame)
        return self.link, list(peers.addresses)

    def send(self, message: Any) -> None:
        assert self.link is not None
        self.link.send_object(message)

    def sender(self, attempt: int) -> Callable[[Any], None]:
        """How the tasks of `attempt` send to the job master (from the loop or the snapshot thread)."""
        outbox = self.outbox

        def send(message: Any) -> None:
            outbox.put(FromTask(attempt, message))

        return send

    def queued(self) -> Iterator[FromTask]:
        """The tasks' messages waiting in the outbox, taken out as they are read."""
        while True:
            try:
                yield self.outbox.get_nowait()
            except queue.Empty:
                return

    def close(self) -> None:
        if self.link is not None:
            self.link.flush_blocking(2.0)
            self.link.close()
