"""The columns a `KeyIndex` keeps: its keys in slot order, and numpy arrays that grow by doubling.

Keys are kept as Arrow data, appended a batch at a time (strings and binaries as their offsets
and bytes, integers as int64), so that `keys_at(slots)` is one `take`.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from .wire.batches import binary_buffers


class GrowableArray:
    """A 1-d numpy array that appends in amortised O(1): its capacity doubles when full."""

    def __init__(self, dtype: Any, fill: Any = 0) -> None:
        self._data = np.full(16, fill, dtype=dtype)
        self._fill = fill
        self._size = 0

    def __len__(self) -> int:
        return self._size

    @property
    def values(self) -> np.ndarray:
        """The filled part, as a view: valid until the next `extend`."""
        return self._data[: self._size]

    def extend(self, values: np.ndarray) -> None:
        end = self._size + len(values)
        if end > len(self._data):
            grown = np.full(max(end, 2 * len(self._data)), self._fill, dtype=self._data.dtype)
            grown[: self._size] = self.values
            self._data = grown
        self._data[self._size : end] = values
        self._size = end

    def grow_to(self, size: int) -> None:
        """Extend with the fill value up to `size` elements (no-op if already that long)."""
        if size > self._size:
            self.extend(np.full(size - self._size, self._fill, dtype=self._data.dtype))

    @property
    def dtype(self) -> np.dtype[Any]:
        return self._data.dtype

    def astype(self, dtype: Any) -> None:
        """Hold `dtype` values from now on (the values so far converted)."""
        self._data = self._data.astype(dtype)


def is_binary_like(t: pa.DataType) -> bool:
    types = pa.types
    return bool(types.is_string(t) or types.is_large_string(t) or types.is_binary(t) or types.is_large_binary(t))


class BinaryKeys:
    """The keys of every slot as one contiguous large string/binary array: one `take` checks them."""

    def __init__(self, key_type: pa.DataType) -> None:
        self.type = key_type
        self._offsets = GrowableArray(np.int64)
        self._offsets.extend(np.zeros(1, dtype=np.int64))
        self._data = GrowableArray(np.uint8)
        self._array: pa.Array | None = None

    def append(self, keys: pa.Array) -> None:
        offsets, data = binary_buffers(keys)
        lo, hi = int(offsets[0]), int(offsets[-1])
        self._offsets.extend(offsets[1:] - lo + self._offsets.values[-1])
        if hi > lo:
            self._data.extend(data[lo:])
        self._array = None

    def array(self) -> pa.Array:
        if self._array is None:  # zero-copy views of the numpy buffers, rebuilt after appends
            buffers = [None, pa.py_buffer(self._offsets.values), pa.py_buffer(self._data.values)]
            self._array = pa.Array.from_buffers(self.type, len(self._offsets) - 1, buffers)
        return self._array


class IntegerKeys:
    """The keys of every slot as one contiguous int64 array."""

    def __init__(self) -> None:
        self._values = GrowableArray(np.int64)
        self._array: pa.Array | None = None

    def append(self, keys: pa.Array) -> None:
        self._values.extend(keys.fill_null(0).to_numpy(zero_copy_only=False))
        self._array = None

    def array(self) -> pa.Array:
        if self._array is None:
            values = self._values.values
            self._array = pa.Array.from_buffers(pa.int64(), len(values), [None, pa.py_buffer(values)])
        return self._array
