"""Event time for users: `WatermarkStrategy`, the where and how-late of a stream's timestamps."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from ..plan.time import Duration, EventTime, WatermarkSpec, seconds


def _event_time(timestamp: str | int | Callable[[Any], Any]) -> EventTime:
    if callable(timestamp):
        return EventTime(fn=timestamp)
    if isinstance(timestamp, bool) or not isinstance(timestamp, (str, int)) or timestamp == "":
        raise TypeError(
            "timestamp must be a column or field name, a tuple index, or a function of the record, "
            f"got {timestamp!r}"
        )
    return EventTime(field=timestamp)


@dataclass(frozen=True, slots=True)
class WatermarkStrategy:
    """Where each record's event time is, and how far out of order records may arrive.

    A watermark `t` says that no record older than `t` is still to come; windows fire and
    event-time timers go off when it passes their time. Each source split generates its own
    watermark (its largest timestamp so far minus the allowed delay), a source subtask's is the
    minimum over its splits, and an operator's the minimum over its inputs.

    Example:
        >>> from epochal import WatermarkStrategy
        >>> strategy = (WatermarkStrategy.bounded_out_of_orderness(5.0, timestamp="ts")
        ...             .with_idleness(30.0))
        >>> strategy.spec.max_delay, strategy.spec.idleness
        (5.0, 30.0)
    """

    spec: WatermarkSpec

    @staticmethod
    def bounded_out_of_orderness(
        max_delay: Duration, *, timestamp: str | int | Callable[[Any], Any]
    ) -> WatermarkStrategy:
        """Records may arrive up to `max_delay` (seconds or a timedelta) after newer ones.

        Args:
            max_delay: how far behind the newest timestamp seen a record may still be on time.
            timestamp: the record's time: an Arrow column or dict key or attribute name, a tuple
                index, or a function of the record. Values are seconds since the epoch (int or
                float), `datetime`s, or Arrow timestamps.
        """
        return WatermarkStrategy(WatermarkSpec(_event_time(timestamp), seconds(max_delay, "max_delay")))

    @staticmethod
    def for_monotonous_timestamps(*, timestamp: str | int | Callable[[Any], Any]) -> WatermarkStrategy:
        """Timestamps never go back within a split (a delay of zero)."""
        return WatermarkStrategy(WatermarkSpec(_event_time(timestamp), 0.0))

    def with_idleness(self, timeout: Duration) -> WatermarkStrategy:
        """A split that delivers nothing for `timeout` stops holding the watermark back."""
        return WatermarkStrategy(replace(self.spec, idleness=seconds(timeout, "timeout", allow_zero=False)))
