"""A worker's event loop when a peer's process is replaced (`Worker._poll_io`, `cluster.peers`).

A new incarnation that accepts its link from a lower worker index waits for it before it builds
the attempt's tasks; what the job master sends those tasks meanwhile (a checkpoint's trigger,
sent right after the `Start`) must reach them once built. It was dropped: a live migration
requested as the attempt started never got its rerouting checkpoint, and the job stalled until
the checkpoint timeout (found by `tests/fault/test_spark_migration_chaos.py`).

One `select` can report both the new incarnation's connection on the listener and the end of
the dead incarnation's link. Accepting the new link drops the old one (closed, unregistered), so
the old link's event, handled next, finds it gone: the worker must go on, not fail. It failed
with `ValueError: Invalid file descriptor: -1`, which took the survivor of a SIGKILLed peer and
its whole Spark stage down (found by `tests/fault/test_spark_migration_chaos.py`).
"""

from __future__ import annotations

import pickle
import socket
import time
from collections.abc import Iterator

import pytest

from epochal import StreamEnvironment
from epochal.cluster.link_guard import LinkGuard
from epochal.cluster.peers import PeerHello
from epochal.cluster.protocol import Start, ToTask
from epochal.cluster.worker import Worker
from epochal.plan.job_graph import TaskId
from epochal.runtime.wire.handshake import Role, new_secret, secure_client
from epochal.runtime.wire.network import CONTROL, HELLO, Link, write_object_blocking
from epochal.testing import CollectSink, ListSource

LAUNCH = 1
GUARD = LinkGuard(new_secret())


def _worker(index: int, incarnation: int) -> Worker:
    """Worker `index` of 2 in its `incarnation`, listening in its event loop."""
    env = StreamEnvironment(parallelism=2, executor="inprocess")
    env.from_source(ListSource(list(range(10)), splits=2)).key_by(lambda x: x % 3).count().sink_to(CollectSink())
    listener = socket.create_server(("127.0.0.1", 0))
    w = Worker(env.job_graph("links"), index, 2, LAUNCH, ("127.0.0.1", 0), listener, listener.getsockname(),
               incarnation, 0.0, GUARD)
    w.peers.addresses = [listener.getsockname()] * 2  # what the job master's `Peers` says
    w.peers.listen()
    return w


@pytest.fixture
def worker() -> Iterator[Worker]:
    """Worker 0 of 2, incarnation 0."""
    w = _worker(0, 0)
    yield w
    w.peers.close()
    w.background.pool.shutdown()
    w.peers.listener.close()


@pytest.fixture
def replacement() -> Iterator[Worker]:
    """Worker 1 of 2 in its second process (incarnation 1), its driver link a loopback pair."""
    w = _worker(1, 1)
    with socket.create_server(("127.0.0.1", 0)) as server:
        driver = socket.create_connection(server.getsockname())
        w.driver.link = Link(server.accept()[0], "driver")
    yield w
    w._close_tasks()
    w.peers.close()
    w.background.pool.shutdown()
    w.peers.listener.close()
    w.driver.link.close()  # type: ignore[union-attr]
    driver.close()


def _connect_as(worker: Worker, peer: int, incarnation: int) -> socket.socket:
    """Worker `peer`'s `incarnation` connecting to `worker` (its incarnation): the handshake and
    the `PeerHello` sent, the link not taken yet (`worker`'s loop takes it when it next polls).
    Connecting blocks until the challenge comes, so the connecting side runs on a thread while
    `worker`'s acceptor answers."""
    import threading

    address = worker.peers.listener.getsockname()
    done: list[socket.socket] = []

    def connect() -> None:
        sock = secure_client(socket.create_connection(address), GUARD.secret, Role.WORKER, Role.WORKER, 5.0)
        write_object_blocking(sock, PeerHello(peer, LAUNCH, incarnation, worker.incarnation), kind=HELLO)
        done.append(sock)

    thread = threading.Thread(target=connect)
    thread.start()
    acceptor = worker.peers.acceptor
    deadline = time.monotonic() + 5
    while not any(p._handshake._server_nonce for p in acceptor._pending.values()) and time.monotonic() < deadline:
        assert acceptor.poll(0.01) == []  # the challenge goes out; the proof has not come yet
    thread.join(5)
    return done[0]


def _control(worker: Worker, message: object) -> None:
    worker._on_control((CONTROL, 0, 0, pickle.dumps(message)))


def test_what_comes_for_an_attempt_whose_tasks_wait_for_a_peer_link_reaches_them_once_built(
    replacement: Worker,
) -> None:
    _control(replacement, Start(2, None, incarnations=(0, 1)))  # worker 0 connects: it is the lower index
    assert replacement.pending is not None and not replacement.tasks
    source = TaskId(replacement.job.vertices[0].id, 1)
    _control(replacement, ToTask(source, "trigger"))  # sent right after the Start
    peer = _connect_as(replacement, 0, 0)
    deadline = time.monotonic() + 5
    while replacement.pending is not None and time.monotonic() < deadline:
        replacement._poll_io(0.1)  # accepts it: the tasks are built
    assert replacement.pending is None and replacement.attempt == 2
    assert "trigger" in replacement.tasks[source].inbox
    peer.close()


def test_a_peer_replaced_while_its_old_link_ends_in_the_same_select_leaves_the_worker_running(
    worker: Worker,
) -> None:
    old = _connect_as(worker, 1, 0)
    deadline = time.monotonic() + 5
    while 1 not in worker.links and time.monotonic() < deadline:
        worker._poll_io(0.1)
    assert worker.peers._between[1] == (0, 0)
    new = _connect_as(worker, 1, 1)  # the listener is ready first, then the old link's end
    time.sleep(0.05)
    old.close()
    time.sleep(0.05)
    for _ in range(3):  # the new link's hello and the old link's end, in one select or two
        worker._poll_io(0.2)  # raised ValueError before the fix
    assert worker.peers._between[1] == (0, 1) and not worker.links[1].closed
    assert not worker.stopped
    new.close()
