"""Event time as plan data: where a record's timestamp is, and how watermarks are generated.

Event time is data, as in Spark (a column) rather than metadata riding on the record as in Flink:
a record's timestamp is one of its fields (an Arrow column, a dict key, an attribute, a tuple
index) or a function of it, and every operator that needs it (windows, event-time timers)
reads it with the same `EventTime` accessor. Times are seconds since the epoch as floats; `int`
and `float` values, `datetime` objects and Arrow `timestamp`/`date` columns are accepted.

Watermarks follow the dissertation's low-watermark model (§6.3, Algorithm 9: a watermark `t`
promises that no record with a timestamp below `t` follows) with Flink's bounded
out-of-orderness: a split's watermark trails the largest timestamp it has read by the
allowed delay.
"""

from __future__ import annotations

import datetime as _dt
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

Duration = int | float | _dt.timedelta

_UNITS = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "ns": 1e-9}


class TimestampError(ValueError):
    """A record's timestamp is missing or is not a time."""


def seconds(value: Duration, name: str, *, allow_zero: bool = True) -> float:
    """A duration in seconds: a non-negative finite number or a `timedelta`."""
    if isinstance(value, _dt.timedelta):
        out = value.total_seconds()
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        out = float(value)
    else:
        raise TypeError(f"{name} must be seconds (int or float) or a datetime.timedelta, got {value!r}")
    if not math.isfinite(out) or out < 0 or (out == 0 and not allow_zero):
        bound = "non-negative" if allow_zero else "positive"
        raise ValueError(f"{name} must be a {bound}, finite duration, got {value!r}")
    return out


def time_of(value: Any) -> float:
    """One timestamp in seconds since the epoch; raises TimestampError if it is not a time."""
    if isinstance(value, bool) or value is None:
        raise TimestampError(f"not a time: {value!r}")
    if isinstance(value, (int, float)):
        out = float(value)
    elif isinstance(value, _dt.datetime):
        out = (value if value.tzinfo else value.replace(tzinfo=_dt.UTC)).timestamp()
    elif isinstance(value, _dt.date):
        out = _dt.datetime(value.year, value.month, value.day, tzinfo=_dt.UTC).timestamp()
    elif isinstance(value, np.generic):
        return time_of(value.item())
    else:
        raise TimestampError(f"not a time: {value!r} ({type(value).__name__})")
    if not math.isfinite(out):
        raise TimestampError(f"not a time: {value!r}")
    return out


def column_seconds(column: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """A column of times as float64 seconds, vectorized; raises TimestampError on nulls or types
    that are not times."""
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    if column.null_count:
        row = int(pc.index(pc.is_null(column), True).as_py())
        raise TimestampError(f"missing timestamp in row {row}")
    kind = column.type
    if pa.types.is_timestamp(kind):
        return np.asarray(column.cast(pa.int64()), dtype=np.float64) * _UNITS[kind.unit]
    if pa.types.is_date32(kind):
        return np.asarray(column.cast(pa.int32()), dtype=np.float64) * 86_400.0
    if pa.types.is_date64(kind):
        return np.asarray(column.cast(pa.int64()), dtype=np.float64) * 1e-3
    if pa.types.is_integer(kind) or pa.types.is_floating(kind):
        out = np.asarray(column, dtype=np.float64)
        if not np.isfinite(out).all():
            row = int(np.flatnonzero(~np.isfinite(out))[0])
            raise TimestampError(f"not a time in row {row}: {out[row]!r}")
        return out
    raise TimestampError(f"a column of {kind} is not a time")


@dataclass(frozen=True, slots=True)
class EventTime:
    """Where a record's event time is: a field (column, key, attribute, index) or a function."""

    field: str | int | None = None
    fn: Callable[[Any], Any] | None = None

    def __post_init__(self) -> None:
        if (self.field is None) == (self.fn is None):
            raise ValueError("event time needs exactly one of a field name (or index) and a function")

    def describe(self) -> str:
        return f"field {self.field!r}" if self.fn is None else f"function {getattr(self.fn, '__name__', self.fn)!r}"

    def of_record(self, record: Any) -> float:
        """The timestamp of one record; TimestampError names what was missing."""
        if self.fn is not None:
            try:
                value = self.fn(record)
            except Exception as exc:  # the user's function: report it as a bad timestamp
                raise TimestampError(f"the timestamp function failed: {type(exc).__name__}: {exc}") from exc
            return time_of(value)
        field = self.field
        try:
            if isinstance(record, dict):
                value = record[field]
            elif isinstance(field, int):
                value = record[field]
            else:
                value = getattr(record, field)  # type: ignore[arg-type]
        except (KeyError, IndexError, AttributeError, TypeError) as exc:
            raise TimestampError(f"the record has no timestamp {self.describe()}") from exc
        return time_of(value)

    def of_records(self, records: Sequence[Any]) -> np.ndarray:
        return np.fromiter((self.of_record(r) for r in records), dtype=np.float64, count=len(records))

    def of_arrow(self, batch: pa.RecordBatch) -> np.ndarray:
        """Timestamps of a whole Arrow batch from its column, vectorized (not for a function)."""
        if self.fn is not None:
            raise TypeError("a timestamp function reads records, not columns")
        if isinstance(self.field, int):
            return column_seconds(batch.column(self.field))
        names = batch.schema.names
        if self.field not in names:
            raise TimestampError(f"the batch has no timestamp column {self.field!r} (columns: {names})")
        return column_seconds(batch.column(self.field))


@dataclass(frozen=True, slots=True)
class WatermarkSpec:
    """How a source (or `assign_timestamps`) generates watermarks.

    Args:
        event_time: where each record's timestamp is.
        max_delay: bounded out-of-orderness: a split's watermark is its largest timestamp so far
            minus this many seconds (0: timestamps never go back).
        idleness: a split that delivered nothing for this many seconds (processing time) stops
            holding the watermark back until it delivers again; None: never.
    """

    event_time: EventTime
    max_delay: float = 0.0
    idleness: float | None = None
