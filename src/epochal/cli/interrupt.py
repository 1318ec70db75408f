"""Serving commands (`epochal serve`, `epochal history --web-port`) run until Ctrl-C or SIGTERM,
and end the same way for both: the handler they replaced is put back."""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable


def wait_for_interrupt(announce: Callable[[], None]) -> None:
    """`announce()` that the command serves, then block until Ctrl-C (SIGINT) or SIGTERM. The
    handler is in place before the announcement: a supervisor that stops the command as soon as
    it reads that line ends it cleanly, not by the signal's default action."""
    stop = threading.Event()
    previous = signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        announce()
        stop.wait()
    except KeyboardInterrupt:
        pass
    finally:
        signal.signal(signal.SIGTERM, previous)
