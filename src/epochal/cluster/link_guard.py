"""What a process of a job needs to open and accept its links: the job's secret and its network
settings (`NetworkConfig`), with the TLS contexts made from them once per process.

The secret never travels inside the job graph or its config (those cross the control link,
which may be plain TCP): the job master's host makes it, and the barrier stage's task closure
carries it to the workers (`cluster.stage_task`).
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass, field

from ..config import NetworkConfig
from ..runtime.wire import tls


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
