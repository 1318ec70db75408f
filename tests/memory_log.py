"""A message log in memory, behind the log-source framework's adapter contract: what a new
adapter has to write (`LogClient` and a `LogSource` with `connect`), and a log the framework's
tests can cut, append to, break and mend in any interleaving (in-process jobs only: the log
lives in this process's `LOGS`)."""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from epochal.connectors.log import Fetched, LogClient, LogSource, LogUnavailable

LOGS: dict[str, MemoryLog] = {}


@dataclass
class MemoryLog:
    """Partitions of `(payload, timestamp)`; offsets are list indices, cursors the next index."""

    partitions: dict[str, list[tuple[bytes, float]]] = field(default_factory=dict)
    committed: dict[tuple[str, str], int] = field(default_factory=dict)
    acks: list[dict[str, int]] = field(default_factory=list)
    down_until: float = 0.0  # the server is away until then (time.monotonic())
    fetches: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def append(self, partition: str, payloads: list[bytes], timestamp: float | None = None) -> None:
        with self.lock:
            rows = self.partitions.setdefault(partition, [])
            rows.extend((p, time.time() if timestamp is None else timestamp) for p in payloads)


class MemoryClient(LogClient):
    def __init__(self, log: MemoryLog) -> None:
        self.log = log

    def _up(self) -> None:
        if time.monotonic() < self.log.down_until:
            raise LogUnavailable("the memory log is down")

    def partitions(self) -> list[str]:
        self._up()
        return sorted(self.log.partitions)

    def earliest(self, partition: str) -> int:
        return 0

    def latest(self, partition: str) -> int:
        self._up()
        return len(self.log.partitions.get(partition, []))

    def at_time(self, partition: str, seconds: float) -> int:
        rows = self.log.partitions.get(partition, [])
        return next((i for i, (_, ts) in enumerate(rows) if ts >= seconds), len(rows))

    def committed(self, partition: str, group: str) -> int | None:
        return self.log.committed.get((group, partition))

    def acknowledge(self, group: str, cursors: Mapping[str, Any]) -> None:
        self._up()
        self.log.acks.append(dict(cursors))
        for partition, cursor in cursors.items():
            self.log.committed[(group, partition)] = cursor

    def fetch(self, partition: str, cursor: Any, max_records: int, stop: Any | None, wait: float) -> Fetched:
        self._up()
        with self.log.lock:
            self.log.fetches += 1
            rows = self.log.partitions.get(partition, [])
            end = min(len(rows), cursor + max_records, stop if stop is not None else len(rows))
            taken = rows[cursor:end]
        if not taken:
            time.sleep(min(wait, 0.01))  # a long poll that found nothing, shortened
        return Fetched([p for p, _ in taken], list(range(cursor, end)), [ts for _, ts in taken], max(cursor, end))

    def after(self, offset: Any) -> int:
        return int(offset) + 1


class MemoryLogSource(LogSource):
    """A `LogSource` over the memory log `name` (a key of `LOGS`)."""

    def __init__(self, name: str, format: Any, **options: Any) -> None:
        super().__init__(format, **options)
        self.name = name

    def connect(self) -> MemoryClient:
        return MemoryClient(LOGS[self.name])

    def describe(self) -> str:
        return f"MemoryLogSource({self.name})"
