"""The chaos runner's fault relay between two workers (tests only, as `runtime.fault_points`).

Not a user feature. `EPOCHAL_LINK_RELAY=host:port`, read once when this module is imported,
makes every worker connect to its peers through the relay at that address (`tests/fault_relay.py`):
it connects there instead, and sends one line naming the link (`EPOCHAL-RELAY <from> <to>
<host>:<port>\n`) before anything else; the relay connects to the peer and passes the bytes on,
until the test tells it to drop, stall or cut the link. The handshake and the frames that follow
are the worker's own: the relay sees what a network would. Unset (the default), a worker
connects to its peer directly.

Spark's Python workers take their environment from the JVM when their daemon starts: set the
variable before the session starts, or per job through `SparkContext.environment`.
"""

from __future__ import annotations

import os
import socket

ENV = "EPOCHAL_LINK_RELAY"
_RELAY = os.environ.get(ENV, "")


def connect_via_relay(worker: int, peer: int, address: tuple[str, int], timeout: float) -> socket.socket:
    """A connection to `peer` at `address`: direct, or through the test's relay if one is set."""
    if not _RELAY:
        return socket.create_connection(address, timeout=timeout)
    host, _, port = _RELAY.rpartition(":")
    sock = socket.create_connection((host, int(port)), timeout=timeout)
    try:
        sock.sendall(f"EPOCHAL-RELAY {worker} {peer} {address[0]}:{address[1]}\n".encode())
    except OSError:
        sock.close()
        raise
    return sock
