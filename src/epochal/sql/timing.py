"""Event time through a grouped query: what lets an aggregate, a window or a join run on an
aggregate's output (Spark's chained stateful operators).

A window's row goes out once the watermark passes the window's end, before that watermark goes
on: its end is a time no later row of the output is below. So a windowed GROUP BY whose SELECT
list keeps `window.end` (or `window_time(window)`, the end less a microsecond, as Spark 4 gives
the time of a window's row) has an event time again: that column. Its final projection says so
(`MapBatchesSpec.event_time`: the watermarks pass on unchanged, the records' time is read from
the new column), and a second `GROUP BY window(that column, ...)`, a `GROUP BY` with that column
among its keys, or an interval join on it runs on the output like on a view.

A `GROUP BY` with the event-time column among its keys and no window (`GROUP BY endtime`, the
maximum per window of q5) closes a group when the watermark passes the end of the second its
time is in: it runs on the window operator with windows of `TICK` (a key's rows all have one
time, so they fall in one window, which fires once the watermark passes it), the time itself
being one of the keys; the projection after it holds the watermark at the start of its
second (`retimed`), so no row it emits later is behind a watermark gone ahead. A second, not a
millisecond: the window operator keeps a column per live window for every key, and a join ahead
that holds the watermark back by a minute (q4) kept 60,000 millisecond columns live, 23 GB at a
million events; a second costs the group at most a second of event time before it goes out, and
counts the rows that come within it behind the watermark (Spark drops them as late: the same on
in-order streams).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc
from sqlglot import exp

from ..plan.specs import MapBatchesSpec, OnError
from ..plan.time import EventTime
from ..plan.windows import Tumbling
from .expressions import Scope, key_of

if TYPE_CHECKING:
    from ..api.stream import DataStream

__all__ = ["TICK", "time_key", "key_window", "output_time", "retimed", "window_time"]

TICK = 1.0  # seconds: the windows a GROUP BY on the event-time column closes its groups by


def time_key(keys: list[exp.Expr], scope: Scope, event_time: str | None) -> int | None:
    """The index of the grouping key that is the event-time column, or None."""
    if event_time is None:
        return None
    for j, key in enumerate(keys):
        if isinstance(key, exp.Column) and scope.columns.get(
                (key.table.lower() if key.table else None, key.name.lower())) == event_time:
            return j
    return None


def key_window() -> Tumbling:
    """The windows of a GROUP BY on the event-time column (see the module's docstring)."""
    return Tumbling(TICK)


def output_time(select: exp.Select, names: list[str], window: exp.Anonymous | None, scope: Scope,
                time_key: int | None) -> str | None:
    """The output column a grouped SELECT's event time is in from here on, or None: the first
    item that is the window's end, `window_time(window)`, or the event-time key as it is."""
    bounds: set[str] = set()
    if window is not None:
        name = window.name.lower()
        bounds = {f"{name}.end", f"window_time({name})"}
    for node, out in zip(select.expressions, names):
        inner = node.this if isinstance(node, exp.Alias) else node
        text = key_of(inner)
        if text in bounds:
            return out
        if time_key is not None and isinstance(inner, exp.Column) and scope.rewrites.get(text) == f"__g{time_key}":
            return out
    return None


def window_time(end: pa.Array) -> pa.Array:
    """`window_time(window)`: the window's end less one microsecond (Spark's time of a window's row)."""
    if pa.types.is_timestamp(end.type):
        micros = end.cast(pa.timestamp("us", tz=end.type.tz))
        return pc.subtract(micros, pa.scalar(1, pa.duration("us")))
    return pc.subtract(end.cast(pa.float64()), 1e-6)


def retimed(stream: DataStream, fn: Callable[[Any], Any], name: str, column: str, tick: float | None = None
            ) -> DataStream:
    """`stream.map_batches(fn)` whose output's event time is `column`; watermarks unchanged, or
    (`tick`: after a GROUP BY on the event-time column) held at the start of their tick, so that
    a group still open, whose row will carry its own time, is not behind them."""
    event_time = EventTime(field=column)
    return stream._add(lambda n: MapBatchesSpec(n, n, fn, OnError.FAIL, event_time, tick), "map_batches", name)
