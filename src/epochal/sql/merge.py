"""What a grouped SQL query runs besides the aggregates themselves (module-level: they pickle).

A window query with several aggregates runs one window operator per aggregate (each on the
columnar slice table, shared slices: dissertation ch. 5), whose results `WindowParts` joins back
per key and window: each part is kept in keyed state until the watermark passes the window's end
(event-time timer), when every operator has fired that window (a window operator emits its results
before it forwards the watermark), and the row goes out with NULL for an aggregate that saw no
non-null value. Keys of several columns travel as one string column (`encode_keys`), decoded after
the aggregates (`decode_keys`): the key exchange hashes one column.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from ..api.context import ProcessContext
from ..api.functions import AggregateFunction, KeyedProcessFunction

__all__ = ["WindowParts", "Tag", "CountDistinct", "encode_keys", "decode_keys", "SEPARATOR", "NULL_KEY"]

SEPARATOR = "\x1f"
NULL_KEY = "\x00"


def encode_keys(columns: list[pa.Array]) -> pa.Array:
    """Several key columns as one string column (NULL as `\\x00`, joined by `\\x1f`)."""
    texts = [pc.fill_null(pc.cast(c, pa.string()), NULL_KEY) for c in columns]
    return pc.binary_join_element_wise(*texts, SEPARATOR)


def decode_keys(keys: pa.Array, types: tuple[pa.DataType, ...]) -> list[pa.Array]:
    """The key columns `encode_keys` joined, back in their types."""
    parts = pc.split_pattern(pc.cast(keys, pa.string()), SEPARATOR)
    out = []
    for i, kind in enumerate(types):
        text = pc.list_element(parts, i)
        text = pc.if_else(pc.equal(text, NULL_KEY), pa.scalar(None, pa.string()), text)
        out.append(pc.cast(text, kind))
    return out


@dataclass(frozen=True, slots=True)
class Tag:
    """A window operator's results as `__key, window_start, window_end, __value, __part`: the
    parts of several aggregates in one stream, for `WindowParts`."""

    part: int

    def __call__(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        key, start, end, value = batch.columns
        part = pa.repeat(pa.scalar(self.part, pa.int32()), batch.num_rows)
        return pa.RecordBatch.from_arrays([key, start, end, value, part],
                                          names=["__key", "window_start", "window_end", "__value", "__part"])


class WindowParts(KeyedProcessFunction):
    """Per key: the parts of each window, out together as `(key, start, end, v0, ..., vn-1)`
    once the watermark passes the window's end."""

    def __init__(self, parts: int) -> None:
        self.parts = parts

    def open(self, ctx: ProcessContext) -> None:
        self.windows = ctx.map_state("windows")  # (start, end) -> [value per part]

    def process_element(self, value: Any, ctx: ProcessContext) -> Iterable[Any] | None:
        _, start, end, result, part = value
        window = (start, end)
        values = self.windows.get(window)
        if values is None:
            values = [None] * self.parts
            ctx.timers.register_event_time(end)
        values = list(values)
        values[part] = result
        self.windows.put(window, values)
        return None

    def on_timer(self, timestamp: float, ctx: ProcessContext) -> Iterable[Any] | None:
        due = sorted(w for w in self.windows.keys() if w[1] <= timestamp)
        out = []
        for window in due:
            values = self.windows.get(window) or [None] * self.parts
            out.append((ctx.key, window[0], window[1], *values))
            self.windows.remove(window)
        return out


class CountDistinct(AggregateFunction[Any, frozenset[Any], int]):
    """count(DISTINCT x) of a window: the set of values (of rows `(key, time, value)`), merged
    across slices; NULL values were filtered out before."""

    def create_accumulator(self) -> frozenset[Any]:
        return frozenset()

    def add(self, value: Any, accumulator: frozenset[Any]) -> frozenset[Any]:
        return accumulator | {value[-1] if isinstance(value, tuple) else value}

    def merge(self, a: frozenset[Any], b: frozenset[Any]) -> frozenset[Any]:
        return a | b

    def get_result(self, accumulator: frozenset[Any]) -> int:
        return len(accumulator)
