"""Time as the runtime sees it: the wall clock, or a virtual one for replayable test runs."""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    def now(self) -> float:
        """Seconds since the epoch (or since the start of a virtual run)."""
        ...

    def sleep(self, seconds: float) -> None:
        """Let `seconds` pass (a virtual clock just moves on)."""
        ...


class WallClock:
    def now(self) -> float:
        return time.time()

    def sleep(self, seconds: float) -> None:
        if seconds > 0:
            time.sleep(seconds)


class VirtualClock:
    """A clock that moves only when told: with a seeded scheduler, a run replays exactly."""

    def __init__(self, start: float = 0.0) -> None:
        self._now = start

    def now(self) -> float:
        return self._now

    def advance(self, seconds: float) -> None:
        self._now += seconds

    def sleep(self, seconds: float) -> None:
        self.advance(max(seconds, 0.0))
