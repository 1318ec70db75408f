"""The worker's snapshot thread, and the GIL switch interval that lets it keep pace.

The asynchronous part of a checkpoint (ABS §4; dissertation §4.5) runs on one background thread
per worker process, beside the worker's event loop; its results go back to the loop, so tasks
learn of them on their own thread. Apart from `cluster.worker` because it is the one place where
the worker's two threads meet.
"""

from __future__ import annotations

import queue
import socket
import sys
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any, TypeVar

R = TypeVar("R")

# Seconds a thread waiting for the GIL lets the running one keep it (CPython's default: 0.005).
SNAPSHOT_SWITCH_INTERVAL = 0.0005


@contextmanager
def snapshot_friendly_gil() -> Iterator[None]:
    """Let the snapshot thread have the GIL back sooner while the worker runs.

    The asynchronous part of a checkpoint releases the GIL at each write, and the worker loop,
    busy with records, takes it; the snapshot thread then waits a whole switch interval for it
    back, once per write (the GIL's convoy effect). Measured on a keyed job whose loop was busy
    on local[2]: writing a few KB of state took 2 to 11.5 s a checkpoint at the default 5 ms,
    and 14 to 26 ms at 0.5 ms, so a rescale's checkpoint took 11.5 s instead of 30 ms. A worker
    whose snapshot thread is idle never hands the GIL over, so the shorter interval costs the
    records nothing then. The previous interval comes back when the worker ends (Spark may reuse
    the Python process).
    """
    previous = sys.getswitchinterval()
    sys.setswitchinterval(SNAPSHOT_SWITCH_INTERVAL)
    try:
        yield
    finally:
        sys.setswitchinterval(previous)


class SnapshotThread:
    """Background snapshot writes on one thread, in submission order.

    A finished write's result waits in `done` until the worker loop hands it on (`run_done`), so
    tasks learn of it on their own thread. Each one also wakes the loop (`wakeup`, a socket in
    its selector): an idle loop waits on its sockets up to 20 ms, and so did the task's
    acknowledgement of a written snapshot (measured: an old owner acknowledged a live move's
    checkpoint 16 to 27 ms after its write, while its new owner held its input for it).
    """

    def __init__(self) -> None:
        self.pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="epochal-snapshot")
        self.side = ThreadPoolExecutor(max_workers=1, thread_name_prefix="epochal-read-ahead")
        self.done: queue.SimpleQueue[tuple[Callable[[Any], None], Future[Any]]] = queue.SimpleQueue()
        self.wakeup, self._wake = socket.socketpair()
        for end in (self.wakeup, self._wake):
            end.setblocking(False)

    def submit(self, work: Callable[[], R], on_done: Callable[[R], None]) -> None:
        self._when_done(self.pool.submit(work), on_done)

    def read_ahead(self, work: Callable[[], R], on_done: Callable[[R], None]) -> None:
        """On a thread of its own: a read-ahead must not delay a snapshot write."""
        self._when_done(self.side.submit(work), on_done)

    def _when_done(self, future: Future[R], on_done: Callable[[R], None]) -> None:
        def finished(f: Future[R]) -> None:
            self.done.put((on_done, f))
            try:
                self._wake.send(b"\0")
            except OSError:  # full (the loop wakes anyway) or closed at shutdown
                pass

        future.add_done_callback(finished)

    def clear_wakeups(self) -> None:
        """On the worker loop, when `wakeup` is readable."""
        try:
            while self.wakeup.recv(4096):
                pass
        except OSError:  # drained
            pass

    def shutdown(self) -> None:
        for pool in (self.pool, self.side):
            pool.shutdown(wait=False, cancel_futures=True)
        self.wakeup.close()
        self._wake.close()

    def run_done(self) -> None:
        """On the worker loop: hand every finished write's result to its task."""
        while True:
            try:
                on_done, future = self.done.get_nowait()
            except queue.Empty:
                return
            on_done(future.result())
