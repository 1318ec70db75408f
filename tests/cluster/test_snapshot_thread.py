"""The worker's snapshot thread wakes the worker loop when a write is done."""

from __future__ import annotations

import selectors
import threading
import time

from epochal.cluster.snapshot_thread import SnapshotThread


def test_a_finished_write_wakes_a_loop_waiting_on_its_sockets_and_reaches_its_task_there() -> None:
    # An idle worker loop waits up to 20 ms on its sockets: without the wake-up, a written
    # snapshot's acknowledgement waited that long (and a live move's new owner with it).
    background = SnapshotThread()
    selector = selectors.DefaultSelector()
    selector.register(background.wakeup, selectors.EVENT_READ)
    release = threading.Event()
    results: list[int] = []
    try:
        background.submit(lambda: release.wait(5) and 7, results.append)
        assert selector.select(0.05) == []  # nothing done yet: nothing wakes the loop
        release.set()
        started = time.monotonic()
        assert len(selector.select(5)) == 1
        assert time.monotonic() - started < 1
        background.clear_wakeups()
        assert selector.select(0) == []  # drained
        background.run_done()  # on the loop's thread
        assert results == [7]
    finally:
        selector.close()
        background.shutdown()
