"""The columnar path: slice and pre-aggregate whole Arrow batches, then merge into the stores.

For the rows at or after the watermark, slice starts come from one binary search per row over the
batch's edges (`SliceEdges.slices_of`), rows are grouped by (key, slice) with one stable sort, and
each group is pre-aggregated in numpy (count, sum, min, max; other aggregates fold per value in
the user's function); only then does Python run, once per (key, slice) group, to merge a partial
into its store. Sessions are cut per key in the batch the same way (runs of sorted timestamps at
most `gap` apart) and merged per run. User-defined windows buffer their rows (their functions
read one record at a time anyway), and rows behind the watermark (rare) take the per-record
path. The result equals the per-record path's for the same rows in the same order: grouping
only reorders additions that commute (the aggregates' merge is associative and commutative; float
sums may differ in the last bits).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from ...plan.time import column_seconds
from .aggregates import Values, WindowAggregate
from .grid import Grid
from .sessions import Sessions
from .store import SliceStore


@dataclass(frozen=True, slots=True)
class ColumnarAdmission:
    """What became of a batch's rows."""

    keys: list[Any]  # the batch's distinct keys: their stores changed (refresh their timers)
    late_rows: np.ndarray  # rows too late for at least one query, ascending
    late_queries: list[tuple[str, ...]]  # per late row: the queries it is too late for
    late_update_keys: list[Any]  # keys that counted rows behind the watermark (fire them next)


def timestamps_in_seconds(timestamps: Any) -> np.ndarray:
    """Timestamps as float64 seconds: an Arrow column of any time type, or numbers."""
    if isinstance(timestamps, (pa.Array, pa.ChunkedArray)):
        return column_seconds(timestamps)
    out = np.asarray(timestamps, dtype=np.float64)
    if not np.isfinite(out).all():
        raise ValueError(f"not a time in row {int(np.flatnonzero(~np.isfinite(out))[0])}")
    return out


def key_codes(keys: Any) -> tuple[np.ndarray, list[Any]]:
    """(code per row, distinct keys): an Arrow column or numpy array of keys (or key indices)."""
    if isinstance(keys, pa.ChunkedArray):
        keys = keys.combine_chunks()
    if isinstance(keys, pa.Array):
        encoded = keys if pa.types.is_dictionary(keys.type) else keys.dictionary_encode(null_encoding="encode")
        codes = np.asarray(encoded.indices.to_numpy(zero_copy_only=False), dtype=np.int64)
        return codes, encoded.dictionary.to_pylist()
    if isinstance(keys, np.ndarray):
        distinct, inverse = np.unique(keys, return_inverse=True)
        return inverse.astype(np.int64).reshape(-1), distinct.tolist()
    index: dict[Any, int] = {}
    codes = np.fromiter((index.setdefault(k, len(index)) for k in keys), dtype=np.int64)
    return codes, list(index)


def take(values: Values, rows: np.ndarray) -> Values:
    if values is None:
        return None
    if isinstance(values, (pa.Array, pa.ChunkedArray)):
        return values.take(pa.array(rows))
    if isinstance(values, np.ndarray):
        return values[rows]
    return [values[i] for i in rows.tolist()]


def python_list(values: Values, n: int) -> list[Any]:
    if values is None:
        return [None] * n
    if isinstance(values, (pa.Array, pa.ChunkedArray)):
        return values.to_pylist()
    if isinstance(values, np.ndarray):
        return values.tolist()
    return list(values)


def _groups(sorted_keys: np.ndarray) -> np.ndarray:
    """Where each run of equal values starts in a sorted array."""
    return np.flatnonzero(np.r_[True, sorted_keys[1:] != sorted_keys[:-1]])


def slice_rows(grid: Grid, aggregate: WindowAggregate, stores: list[SliceStore], codes: np.ndarray, ts: np.ndarray,
               items: Values) -> None:
    """Periodic queries: one partial per (key, slice) of the batch, merged into the stores."""
    index, slice_starts, slice_ends = grid.edges.slices_of(ts)
    slices = len(slice_starts)
    group = codes * slices + index
    reduced = aggregate.reduce_by_code(items, group, len(stores) * slices)
    if reduced is not None:
        present, partials = reduced
    else:
        order = np.argsort(group, kind="stable")
        bounds = _groups(group[order])
        present = group[order[bounds]]
        partials = aggregate.reduce_groups(items, order, bounds)
    which = present % slices
    add = grid.add_partial
    for store_code, start, end, partial in zip((present // slices).tolist(), slice_starts[which].tolist(),
                                               slice_ends[which].tolist(), partials):
        add(stores[store_code], start, end, partial)


def session_rows(sessions: Sessions, aggregate: WindowAggregate, stores: list[SliceStore], codes: np.ndarray,
                 ts: np.ndarray, items: Values) -> None:
    """Session queries: the batch's runs per key (sorted timestamps at most gap apart), merged."""
    order = np.lexsort((ts, codes))  # stable: equal times keep their arrival order
    sorted_codes, sorted_ts = codes[order], ts[order]
    same_key = sorted_codes[1:] == sorted_codes[:-1]
    for q, gap in enumerate(sessions.gaps):
        bounds = np.flatnonzero(np.r_[True, ~same_key | (sorted_ts[1:] > sorted_ts[:-1] + gap)])
        lasts = np.r_[bounds[1:], len(order)] - 1
        partials = aggregate.reduce_groups(items, order, bounds)
        for store_code, start, last, partial in zip(sorted_codes[bounds].tolist(), sorted_ts[bounds].tolist(),
                                                    sorted_ts[lasts].tolist(), partials):
            sessions.add_run(stores[store_code], q, start, last + gap, partial)
