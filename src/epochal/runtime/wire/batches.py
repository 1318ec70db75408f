"""Conversions between the two batch shapes: Python lists and Arrow record batches.

Records stay columnar as long as operators allow: Arrow → Python objects costs far more than
any vectorized step (measured between two Spark tasks: tens of millions of Arrow rows/s, under
two million pickled tuples/s). The conversion rules are fixed so that the per-record and the
columnar path of a program produce the same records: an Arrow row is a tuple of its columns, or
the bare value when there is one column.
"""

from __future__ import annotations

from collections.abc import Sequence
from operator import itemgetter
from typing import Any

import numpy as np
import pyarrow as pa

from .elements import Batch


def binary_buffers(array: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """`(offsets, data)` of a string or binary array of either width, as zero-copy numpy views.

    Row i is `data[offsets[i] : offsets[i + 1]]`. A sliced array's offsets index its parent's
    data, so `data` runs from the buffer's start to the array's last byte.
    """
    large = pa.types.is_large_string(array.type) or pa.types.is_large_binary(array.type)
    _, offsets_buffer, data_buffer = array.buffers()
    offsets = np.frombuffer(offsets_buffer, dtype=np.int64 if large else np.int32, count=array.offset + len(array) + 1)
    offsets = offsets[array.offset :]
    end = int(offsets[-1])
    data = np.frombuffer(data_buffer, dtype=np.uint8, count=end) if end else np.empty(0, np.uint8)
    return offsets, data


def columns_of(rows: Sequence[Sequence[Any]], width: int) -> list[list[Any]]:
    """Rows of `width` fields as `width` columns (lists).

    `zip(*rows)` passes every row as an argument: on a batch of 300,000 pairs it took 190-230 ms
    of CPU against 21 ms here (one C-level pass per column)."""
    return [list(map(itemgetter(i), rows)) for i in range(width)]


def batch_len(batch: Batch) -> int:
    return batch.num_rows if isinstance(batch, pa.RecordBatch) else len(batch)


def to_records(batch: Batch) -> list[Any]:
    """Python records of a batch: Arrow rows become tuples (or bare values for one column)."""
    if isinstance(batch, list):
        return batch
    columns = [col.to_pylist() for col in batch.columns]
    if len(columns) == 1:
        return columns[0]
    return list(zip(*columns))


def to_arrow(batch: Batch) -> pa.RecordBatch:
    """An Arrow record batch of a batch: scalars → column `value`, tuples → `f0…`, dicts by key."""
    if isinstance(batch, pa.RecordBatch):
        return batch
    if not batch:
        return pa.RecordBatch.from_pydict({"value": pa.array([], pa.null())})
    first = batch[0]
    if isinstance(first, dict):
        names = list(dict.fromkeys(k for record in batch for k in record))  # every key, first-seen order
        return pa.RecordBatch.from_pydict({n: [record.get(n) for record in batch] for n in names})
    if isinstance(first, tuple):
        width = len(first)
        for record in batch:
            if not isinstance(record, tuple) or len(record) != width:
                raise ValueError(
                    f"cannot make columns of tuples of different lengths: {first!r} and {record!r}"
                )
        columns = columns_of(batch, width)
        return pa.RecordBatch.from_arrays(
            [pa.array(c) for c in columns], names=[f"f{i}" for i in range(len(columns))]
        )
    return pa.RecordBatch.from_arrays([pa.array(batch)], names=["value"])
