"""One asyncio event loop per process, on a thread of its own, for the NATS client.

`nats-py` is asyncio only, and the log framework calls its clients from plain threads (the
fetchers, the task's thread at a commit, the job master's listing). Every NATS connection of
a process lives on this loop; a caller submits a coroutine and waits for its result with a
timeout, so a server that does not answer turns into `LogUnavailable`, never a hang. A process
forked from one that had the loop (Spark's Python workers are forked) makes its own.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

from ..log.client import LogUnavailable

__all__ = ["run"]

T = TypeVar("T")

_lock = threading.Lock()
_loop: asyncio.AbstractEventLoop | None = None
_pid = -1


def _shared() -> asyncio.AbstractEventLoop:
    global _loop, _pid
    with _lock:
        if _loop is None or _pid != os.getpid() or not _loop.is_running():
            loop = asyncio.new_event_loop()
            started = threading.Event()

            def body() -> None:
                asyncio.set_event_loop(loop)
                loop.call_soon(started.set)
                loop.run_forever()

            threading.Thread(target=body, name="epochal-nats-loop", daemon=True).start()
            started.wait()
            _loop, _pid = loop, os.getpid()
        return _loop


def run(coroutine: Coroutine[Any, Any, T], timeout: float, what: str) -> T:
    """The result of `coroutine`, run on the process's NATS loop.

    Raises:
        LogUnavailable: no result within `timeout` seconds (the coroutine is cancelled).
    """
    future = asyncio.run_coroutine_threadsafe(coroutine, _shared())
    try:
        return future.result(timeout)
    except concurrent.futures.TimeoutError:
        future.cancel()
        raise LogUnavailable(f"{what}: no answer within {timeout:g} s") from None
