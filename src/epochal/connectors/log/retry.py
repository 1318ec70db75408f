"""Waiting out a log server that is down: retry with backoff, then fail in one clear line.

A server restarted under a running job (an upgrade, a crash) should cost a pause, not a restart
of the job, and never a record: a source's reads resume at the cursor they stopped at, a sink's
commit is idempotent and is simply tried again. A server that stays away longer than
`unavailable_timeout` fails the attempt with an error that names the server and what was being
done; the job then restarts from its latest checkpoint (its restart strategy permitting), which
loses nothing either.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TypeVar

from ...errors import EpochalError
from .client import LogUnavailable

__all__ = ["Outage", "retrying"]

log = logging.getLogger(__name__)

T = TypeVar("T")
_FIRST_WAIT, _LONGEST_WAIT = 0.05, 1.0  # seconds between tries: doubling from the first to the longest


class Outage:
    """The state of one caller's outage: since when, and the next wait."""

    def __init__(self, what: str, timeout: float) -> None:
        self.what = what
        self.timeout = timeout
        self.since: float | None = None
        self._wait = _FIRST_WAIT

    def failed(self, exc: BaseException) -> float:
        """A try failed with `exc`: the seconds to wait before the next one.

        Raises:
            EpochalError: the server has been unreachable for longer than the timeout.
        """
        now = time.monotonic()
        if self.since is None:
            self.since = now
            log.warning("%s: the server is unreachable (%s: %s); retrying for up to %g s",
                        self.what, type(exc).__name__, exc, self.timeout)
        elif now - self.since > self.timeout:
            raise EpochalError(
                f"{self.what}: the server was unreachable for {now - self.since:.0f} s "
                f"(unavailable_timeout={self.timeout:g}): {type(exc).__name__}: {exc}"
            ) from exc
        wait, self._wait = self._wait, min(self._wait * 2, _LONGEST_WAIT)
        return wait

    def recovered(self) -> None:
        if self.since is not None:
            log.warning("%s: the server is back after %.1f s", self.what, time.monotonic() - self.since)
        self.since, self._wait = None, _FIRST_WAIT


def retrying(call: Callable[[], T], what: str, timeout: float, transient: tuple[type[BaseException], ...],
             on_failure: Callable[[], None] | None = None) -> T:
    """`call()`, tried again while it fails with `LogUnavailable` or a `transient` error, for up
    to `timeout` seconds; `on_failure` runs after each failed try (e.g. to reconnect)."""
    outage = Outage(what, timeout)
    caught: tuple[type[BaseException], ...] = (LogUnavailable, *transient)
    while True:
        try:
            result = call()
        except caught as exc:
            wait = outage.failed(exc)
            if on_failure is not None:
                on_failure()
            time.sleep(wait)
            continue
        outage.recovered()
        return result
