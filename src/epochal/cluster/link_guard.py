"""What a process of a job needs to open and accept its links: the job's secret and its network
settings (`NetworkConfig`), with the TLS contexts made from them once per process.

The secret never travels inside the job graph or its config (those cross the control link,
which may be plain TCP): the job master's host makes it, and the barrier stage's task closure
carries it to the workers (`cluster.stage_task`).
"""

from __future__ import annotations

import socket
import ssl
from dataclasses import dataclass, field

from ..config import NetworkConfig
from ..runtime.wire import tls
from ..runtime.wire.handshake import HandshakeRefused, Role, secure_client
from .protocol import JobMasterUnreachable

CONNECT_TIMEOUT = 10.0  # seconds for a worker's connection to the job master (lost SYNs are resent)
UNREACHABLE = "the Spark workers cannot reach the job master"


@dataclass(frozen=True, slots=True)
class LinkGuard:
    """The job's secret and network settings, on one side of its links."""

    secret: bytes = field(repr=False)
    network: NetworkConfig = field(default_factory=NetworkConfig)

    @property
    def timeout(self) -> float:
        return self.network.handshake_timeout

    @property
    def max_frame(self) -> int:
        return self.network.max_frame_bytes

    def server_tls(self) -> ssl.SSLContext | None:
        return None if self.network.tls is None else tls.server_context(self.network.tls)

    def client_tls(self) -> ssl.SSLContext | None:
        return None if self.network.tls is None else tls.client_context(self.network.tls)

    def connect_to_job_master(
        self, address: tuple[str, int], worker: int, timeout: float = CONNECT_TIMEOUT
    ) -> socket.socket:
        """A connection to the job master, which listens before the stage is submitted, once it
        proved it knows the job's secret: a refusal, a timeout or a wrong proof means this
        executor cannot reach the job's job master, and retrying would not change that
        (`JobMasterUnreachable`, its message starting with `UNREACHABLE`)."""
        try:
            sock = socket.create_connection(address, timeout=timeout)
            return secure_client(sock, self.secret, Role.WORKER, Role.JOB_MASTER, self.timeout, self.client_tls())
        except HandshakeRefused as exc:
            reason = f"what answers there is not the job's job master: {exc}"
        except OSError as exc:
            reason = "timed out" if isinstance(exc, TimeoutError) else (exc.strerror or str(exc)).lower()
        raise JobMasterUnreachable(
            f"{UNREACHABLE} at {address[0]}:{address[1]} from worker {worker} on {socket.gethostname()} ({reason})"
        )
