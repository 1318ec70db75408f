"""A worker's event loop when a peer's process is replaced (`Worker._poll_io`, `cluster.peers`).

One `select` can report both the new incarnation's connection on the listener and the end of
the dead incarnation's link. Accepting the new link drops the old one (closed, unregistered), so
the old link's event, handled next, finds it gone: the worker must go on, not fail. It failed
with `ValueError: Invalid file descriptor: -1`, which took the survivor of a SIGKILLed peer and
its whole Spark stage down (found by `tests/fault/test_spark_migration_chaos.py`).
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator

import pytest

from epochal import StreamEnvironment
from epochal.cluster.peers import PeerHello
from epochal.cluster.worker import Worker
from epochal.runtime.network import HELLO, write_object_blocking
from epochal.testing import CollectSink, ListSource

LAUNCH = 1


@pytest.fixture
def worker() -> Iterator[Worker]:
    """Worker 0 of 2, listening in its event loop."""
    env = StreamEnvironment(parallelism=2, executor="inprocess")
    env.from_source(ListSource(list(range(10)), splits=2)).key_by(lambda x: x % 3).count().sink_to(CollectSink())
    listener = socket.create_server(("127.0.0.1", 0))
    w = Worker(env.job_graph("links"), 0, 2, LAUNCH, ("127.0.0.1", 0), listener, [listener.getsockname()] * 2)
    w.peers.listen()
    yield w
    w.peers.close()
    w.background.pool.shutdown()
    listener.close()


def _connect_as(worker: Worker, incarnation: int) -> socket.socket:
    """Worker 1's `incarnation` connecting to worker 0 (incarnation 0)."""
    sock = socket.create_connection(worker.peers.listener.getsockname())
    write_object_blocking(sock, PeerHello(1, LAUNCH, incarnation, 0), kind=HELLO)
    return sock


def test_a_peer_replaced_while_its_old_link_ends_in_the_same_select_leaves_the_worker_running(
    worker: Worker,
) -> None:
    old = _connect_as(worker, 0)
    worker._poll_io(1.0)
    assert worker.peers._between[1] == (0, 0)
    new = _connect_as(worker, 1)  # the listener is ready first, then the old link's end
    time.sleep(0.05)
    old.close()
    time.sleep(0.05)
    worker._poll_io(1.0)  # raised ValueError before the fix
    assert worker.peers._between[1] == (0, 1) and not worker.links[1].closed
    assert not worker.stopped
    new.close()
