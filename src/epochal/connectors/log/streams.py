"""The streams a log source reads: names, or glob patterns (`clicks-*`) matched against the
streams that exist at each listing, so that streams created while the job runs are found (as
Flink's Kafka source does with a topic pattern). JetStream and Redis Streams both select so."""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

_PATTERN = frozenset("*?[")


@dataclass(frozen=True, slots=True)
class StreamSelection:
    """Stream names or glob patterns, as the user gave them."""

    entries: tuple[str, ...]

    @classmethod
    def parse(cls, argument: str, given: str | Sequence[str], what: str) -> StreamSelection:
        """`given` (one entry or several), checked: `argument` and `what` name it in the error."""
        entries = (given,) if isinstance(given, str) else tuple(given)
        if not entries or not all(isinstance(s, str) and s for s in entries):
            raise ValueError(f"{argument}: {what}, got {given!r}")
        return cls(entries)

    @property
    def has_pattern(self) -> bool:
        """Whether the streams must be listed to be known (a named stream needs no listing)."""
        return any(_PATTERN & set(s) for s in self.entries)

    def select(self, existing: Iterable[str]) -> list[str]:
        """The streams to read of those that exist (all the named ones when no pattern is given)."""
        if not self.has_pattern:
            return list(self.entries)
        return sorted({name for name in existing for pattern in self.entries if fnmatch.fnmatchcase(name, pattern)})

    def __str__(self) -> str:
        return ", ".join(self.entries)
