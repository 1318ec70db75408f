"""Positions a source acknowledges back to its system once a checkpoint completes.

Flink's Kafka source commits the offsets of checkpoint *n* to Kafka when *n* completes
(`notifyCheckpointComplete`), for monitoring tools: consumer lag, a group's progress. Recovery
never reads them back, it restores the checkpoint's own positions (dissertation §3.4), so an
acknowledgement that fails or comes late loses nothing. A source that wants this says so with
`acknowledges = True` and a method `acknowledge(checkpoint_id, positions)` (duck-typed, as
`discovery_interval` is).
"""

from __future__ import annotations

import logging
from typing import Any

log = logging.getLogger(__name__)

__all__ = ["PositionAcks", "acknowledges"]


def acknowledges(source: Any) -> bool:
    """Whether `source` wants its positions when a checkpoint completes."""
    return bool(getattr(source, "acknowledges", False)) and callable(getattr(source, "acknowledge", None))


class PositionAcks:
    """The positions one source subtask took at each checkpoint, until that one completes."""

    def __init__(self, source: Any, operator: str) -> None:
        self.source = source
        self.operator = operator
        self._taken: dict[int, dict[str, Any]] = {}
        self._ended: dict[str, Any] = {}  # splits read to their end since the last checkpoint

    def finished(self, split_id: str, position: Any) -> None:
        """A split was read to its end at `position` (it leaves the checkpoint's positions)."""
        self._ended[split_id] = position

    def taken(self, checkpoint_id: int, positions: dict[str, Any]) -> None:
        self._taken[checkpoint_id] = {**self._ended, **positions}
        self._ended = {}

    def completed(self, checkpoint_id: int) -> None:
        """Checkpoint `checkpoint_id` completed: acknowledge its positions (those of an earlier
        one that never completed are subsumed)."""
        due = [c for c in self._taken if c <= checkpoint_id]
        if not due:
            return
        latest = max(due)
        positions = self._taken[latest]
        for c in due:
            del self._taken[c]
        try:
            self.source.acknowledge(latest, positions)
        except Exception as exc:  # noqa: BLE001 - monitoring only: never fails the job
            log.warning("source %r: acknowledging checkpoint %d failed: %s: %s", self.operator, latest,
                        type(exc).__name__, exc)
