"""The job master's port on the driver, where every worker process opens its control link.

A connection becomes a worker's link once it passed the job's handshake (`runtime.wire.handshake`,
`runtime.wire.incoming`) and said `Hello`; the workers' control links (`cluster.control_links`)
ask for the hellos of the launch the stage host (`cluster.stage_host`) waits for. Connections
are taken, and refused when they fail the handshake (logged, counted in the job's metrics),
whenever the host's loop looks, also while the attempt runs, so a stranger's connection never
waits in the backlog for the next relaunch; a hello that comes meanwhile (a replaced worker's new
process) waits here until the host asks for it.
"""

from __future__ import annotations

import socket
from collections import deque

from ..runtime.wire.handshake import Refusals, Role
from ..runtime.wire.incoming import Accepted, Acceptor
from ..runtime.wire.network import Link
from .link_guard import LinkGuard
from .protocol import Hello


class MasterPort:
    """The listening socket, its acceptor, and the proven hellos not asked for yet."""

    def __init__(self, host: str, workers: int, guard: LinkGuard, refusals: Refusals) -> None:
        self.server = socket.create_server((host, 0), backlog=max(8, workers * 2))
        self.address = (host, self.server.getsockname()[1])
        self.acceptor = Acceptor(
            self.server, "job master", guard.secret, Role.JOB_MASTER, Role.WORKER, refusals.add,
            guard.server_tls(), guard.timeout, guard.max_frame,
        )
        self._hellos: deque[Accepted] = deque()
        self.workers_listening: dict[int, str] = {}  # worker → host:port of its data port (its hello says)

    @property
    def listening(self) -> str:
        return f"{self.address[0]}:{self.address[1]}"

    def listening_status(self) -> tuple[tuple[str, str], ...]:
        """This port and the workers' data ports, as `JobStatus.listening` shows them."""
        workers = sorted(self.workers_listening.items())
        return (("job master", self.listening), *((f"worker {w}", where) for w, where in workers))

    def poll(self) -> None:
        """Take and advance connections now (the host's loop, while an attempt runs)."""
        self._hellos.extend(self.acceptor.poll(0.0))

    def next_hello(self, launch: int, timeout: float) -> tuple[Hello, Link] | None:
        """A worker process's `Hello` of `launch`, if one is here or comes within `timeout`."""
        if not self._hellos:
            self._hellos.extend(self.acceptor.poll(timeout))
        while self._hellos:
            accepted = self._hellos.popleft()
            hello = accepted.hello
            if isinstance(hello, Hello) and hello.launch == launch:
                accepted.link.peer = f"worker {hello.worker}"
                self.workers_listening[hello.worker] = hello.listening
                return hello, accepted.link
            accepted.link.close()  # a process of an earlier launch, still saying hello
        return None

    def close(self) -> None:
        for accepted in self._hellos:
            accepted.link.close()
        self._hellos.clear()
        self.acceptor.close()
        self.server.close()
