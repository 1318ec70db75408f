"""The worker's asyncio event loop, driven from the host's own loop (async I/O, `map_async`).

A worker is one process with one selector loop (`cluster/worker.py`); an `await` must not block
it, and a thread pool would only contend for the GIL. So each host thread owns one asyncio event
loop that never runs on its own: the host *pumps* it, one non-blocking iteration at a time
(`pump`: `stop()` then `run_forever()`, which polls the loop's selector with a zero timeout and
runs what is ready, as asyncio documents), and, when it has nothing else to do, waits for the
loop's sockets and timers alongside its own (`fileno`, the loop's epoll descriptor, which is
readable whenever one of the loop's sockets is ready; `next_deadline`, its next timer). Clients
built for asyncio (`aiohttp`) run on it unchanged: for them it is a running event loop.

Two private attributes of CPython's `BaseEventLoop` are read, `_scheduled` (the timer heap) and
`_ready` (callbacks due now), because asyncio has no public way to ask when it next needs to run;
both have kept their meaning since Python 3.4. A loop whose selector has no descriptor (not
epoll or kqueue) is still correct: the host then polls it every `FALLBACK_POLL` seconds.
"""

from __future__ import annotations

import asyncio
import math
import select
import threading
import time
from collections.abc import Awaitable, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")

FALLBACK_POLL = 0.001  # seconds between pumps while work is pending and the loop has no descriptor


class AsyncDriver:
    """One thread's asyncio event loop, pumped by its host; `busy` counts the work in flight."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.busy = 0  # requests in flight on this loop (operators count theirs in and out)
        selector = getattr(self.loop, "_selector", None)
        fileno = getattr(selector, "fileno", None)
        self._fd: int | None = None
        if fileno is not None:
            try:
                self._fd = int(fileno())
            except (OSError, ValueError, TypeError):
                self._fd = None

    @property
    def is_active(self) -> bool:
        """Whether the loop has work: requests in flight, callbacks or timers to run."""
        return bool(self.busy or getattr(self.loop, "_ready", ()) or getattr(self.loop, "_scheduled", ()))

    def pump(self) -> None:
        """Run one iteration of the loop without blocking: ready I/O, due timers, callbacks."""
        loop = self.loop
        if loop.is_closed() or loop.is_running():
            return
        loop.stop()
        loop.run_forever()

    def fileno(self) -> int | None:
        """A descriptor readable when a socket of the loop is ready (None: there is none)."""
        return self._fd

    def next_deadline(self) -> float | None:
        """Seconds until the loop must run again: 0 with callbacks ready, the next timer's
        delay, `FALLBACK_POLL` while busy without a descriptor, else None (only I/O wakes it)."""
        loop = self.loop
        if getattr(loop, "_ready", None):
            return 0.0
        best = math.inf
        scheduled = getattr(loop, "_scheduled", None)
        if scheduled:
            best = max(0.0, scheduled[0].when() - loop.time())
        if self.busy and self._fd is None:
            best = min(best, FALLBACK_POLL)
        return None if best == math.inf else best

    def wait(self, timeout: float) -> None:
        """Block up to `timeout` seconds for the loop's I/O or next timer, then pump it (for a
        host that has nothing else to wait on: the in-process executor)."""
        deadline = self.next_deadline()
        if deadline is not None:
            timeout = min(timeout, deadline)
        if timeout > 0:
            if self._fd is not None:
                select.select([self._fd], [], [], timeout)
            else:
                time.sleep(min(timeout, FALLBACK_POLL))
        self.pump()

    def run(self, awaitable: Awaitable[T], timeout: float | None = None) -> T:
        """Run `awaitable` to its end, blocking the host (an async `open` or `close`, once per
        subtask); other work on the loop goes on meanwhile."""
        async def bounded() -> T:
            return await asyncio.wait_for(awaitable, timeout)

        coroutine: Coroutine[Any, Any, T] = bounded()
        return self.loop.run_until_complete(coroutine)

    def close(self) -> None:
        """Cancel what is left and close the loop."""
        loop = self.loop
        if loop.is_closed():
            return
        for task in asyncio.all_tasks(loop):
            task.cancel()
        self.pump()
        loop.close()


_local = threading.local()


def driver() -> AsyncDriver:
    """This thread's loop, made on first use (an async operator's `open`)."""
    found: AsyncDriver | None = getattr(_local, "driver", None)
    if found is None or found.loop.is_closed():
        found = _local.driver = AsyncDriver()
    return found


def active_driver() -> AsyncDriver | None:
    """This thread's loop if it has work, else None: what hosts check each round, cheaply."""
    found: AsyncDriver | None = getattr(_local, "driver", None)
    if found is None or found.loop.is_closed() or not found.is_active:
        return None
    return found


def existing_driver() -> AsyncDriver | None:
    """This thread's loop if one was made (busy or not)."""
    found: AsyncDriver | None = getattr(_local, "driver", None)
    return None if found is None or found.loop.is_closed() else found
