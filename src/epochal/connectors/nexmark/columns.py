"""Arrow columns built without a Python object per value: random text, digit strings, and a
kind's compact column widened to the length of the mixed event batch.

Random strings are slices of a pool of random text made once per seed: a string is a
(start, length) pair drawn per event, so its content is a pure function of the event id, and a
whole column is built by Arrow in one pass. The column is first an Arrow `string_view` array whose
views point into the pool (no bytes copied), then cast to a plain `string` array (one copy, in
C++), which every consumer (pyarrow.compute, Parquet, Spark) reads. Where `string_view` is not
available (pyarrow before 16), a numpy gather builds the same bytes.
"""

from __future__ import annotations

import functools

import numpy as np
import pyarrow as pa

from .counter_random import EventDraws, below, high, low

_INLINE = 12  # Arrow's string_view keeps strings of at most 12 bytes inside the view itself


def _has_string_view() -> bool:
    try:
        view = pa.Array.from_buffers(pa.string_view(), 1, [None, pa.py_buffer(bytes(16))])
        return bool(view.cast(pa.string()).to_pylist() == [""])
    except (AttributeError, NotImplementedError, pa.ArrowException):
        return False


_STRING_VIEW = _has_string_view()


class TextPool:
    """Random text that strings are sliced from.

    Args:
        key: the stream key of its content (`counter_random.stream_key`).
        size: how many distinct start positions a string has.
        max_length: the longest string that will be sliced (the pool has this much slack).
        spaces: one character in 13 is a space (Beam's random words), else only letters.
    """

    __slots__ = ("size", "max_length", "_bytes", "_buffer", "_windows", "_prefixes")

    def __init__(self, key: int, size: int, max_length: int, spaces: bool) -> None:
        self.size = size
        self.max_length = max(max_length, _INLINE)
        draws = EventDraws(key, np.arange(size + self.max_length, dtype=np.int64)).draw(0)
        text = (below(low(draws), 26) + ord("a")).astype(np.uint8)
        if spaces:
            text[below(high(draws), 13) == 0] = ord(" ")
        self._bytes = text
        self._buffer = pa.py_buffer(text)
        self._windows = np.lib.stride_tricks.sliding_window_view(text, self.max_length)
        # the first 4 bytes of the string at each start, as the little-endian int32 a view holds
        self._prefixes = np.ascontiguousarray(self._windows[:, :4]).view("<i4").ravel()

    def starts(self, u32: np.ndarray) -> np.ndarray:
        """Uniform start positions from 32-bit draws."""
        return below(u32, self.size)

    def strings(self, starts: np.ndarray, lengths: np.ndarray) -> pa.Array:
        """The strings `pool[start : start + length]`, as a `string` array with no nulls."""
        n = len(starts)
        if n == 0:
            return pa.array([], pa.string())
        lengths = lengths.astype(np.int32)
        if int(lengths.max()) > self.max_length:
            raise ValueError(f"a string of {int(lengths.max())} bytes is longer than the pool allows")
        if _STRING_VIEW:
            return self._by_views(starts, lengths)
        return self._by_gather(starts, lengths)

    def _by_views(self, starts: np.ndarray, lengths: np.ndarray) -> pa.Array:
        n = len(starts)
        views = np.zeros((n, 16), dtype=np.uint8)
        words = views.view("<i4")
        words[:, 0] = lengths
        long = lengths > _INLINE
        if long.all():
            words[:, 1] = self._prefixes[starts]
            words[:, 3] = starts
        else:
            rows = np.flatnonzero(long)
            words[rows, 1] = self._prefixes[starts[rows]]
            words[rows, 3] = starts[rows]
            rows = np.flatnonzero(~long)
            inline = self._windows[starts[rows], :_INLINE]
            keep = np.arange(_INLINE, dtype=np.int32)[None, :] < lengths[rows, None]
            views[rows, 4:] = np.where(keep, inline, 0)
        array = pa.Array.from_buffers(pa.string_view(), n, [None, pa.py_buffer(views), self._buffer])
        return array.cast(pa.string())

    def _by_gather(self, starts: np.ndarray, lengths: np.ndarray) -> pa.Array:
        width = int(lengths.max())
        rows = self._windows[starts, :width]
        data = rows[np.arange(width, dtype=np.int32)[None, :] < lengths[:, None]]
        offsets = np.zeros(len(starts) + 1, dtype=np.int32)
        np.cumsum(lengths, out=offsets[1:])
        return pa.StringArray.from_buffers(len(starts), pa.py_buffer(offsets), pa.py_buffer(data))


@functools.lru_cache(maxsize=16)
def text_pool(key: int, size: int, max_length: int, spaces: bool) -> TextPool:
    """A shared `TextPool`: the readers of one source in one process build it once."""
    return TextPool(key, size, max_length, spaces)


def digit_groups(groups: list[np.ndarray], digits: int, separator: str = " ") -> pa.Array:
    """Fixed-width strings of zero-padded numbers joined by `separator` ("0042 1337 ..."):
    `groups[g][i]` is the `g`-th number of string `i`, each below 10**digits."""
    n = len(groups[0])
    step = digits + len(separator)
    width = step * len(groups) - len(separator)
    chars = np.full((n, width), ord(separator) if separator else 0, dtype=np.uint8)
    for g, values in enumerate(groups):
        rest = values.astype(np.int64)
        for d in range(digits - 1, -1, -1):
            chars[:, g * step + d] = rest % 10 + ord("0")
            rest //= 10
    offsets = np.arange(0, (n + 1) * width, width, dtype=np.int32)
    return pa.StringArray.from_buffers(n, pa.py_buffer(offsets), pa.py_buffer(chars))


def members_before(member: np.ndarray) -> np.ndarray:
    """For each row of a mixed batch (and one past the end), how many member rows come before:
    where a kind's compact column starts for that row."""
    counts = np.zeros(len(member) + 1, dtype=np.int64)
    np.cumsum(member, out=counts[1:])
    return counts


def widen(compact: pa.Array, rows: np.ndarray, before: np.ndarray) -> pa.Array:
    """A kind's compact column (one value per member row, in row order) as a column of the whole
    batch: member rows take their value, other rows an empty string or a zero.

    The other rows are hidden behind the kind's null struct entry, so their value is never read;
    strings share the compact column's bytes (only the offsets are rebuilt).
    """
    m = len(before) - 1
    kind = compact.type
    if pa.types.is_string(kind):
        if len(compact) == 0:
            return pa.StringArray.from_buffers(m, pa.py_buffer(np.zeros(m + 1, dtype=np.int32)), pa.py_buffer(b""))
        buffers = compact.buffers()
        offsets = np.frombuffer(buffers[1], dtype=np.int32)[compact.offset : compact.offset + len(compact) + 1]
        return pa.StringArray.from_buffers(m, pa.py_buffer(np.ascontiguousarray(offsets[before])), buffers[2])
    if pa.types.is_dictionary(kind):
        indices = np.zeros(m, dtype=kind.index_type.to_pandas_dtype())
        indices[rows] = compact.indices.to_numpy(zero_copy_only=False)
        return pa.DictionaryArray.from_arrays(pa.array(indices), compact.dictionary)
    storage = kind
    values = compact
    if pa.types.is_timestamp(kind):
        storage = pa.int64()
        values = compact.cast(pa.int64())
    full = np.zeros(m, dtype=storage.to_pandas_dtype())
    full[rows] = values.to_numpy(zero_copy_only=False)
    return pa.Array.from_buffers(kind, m, [None, pa.py_buffer(full)])
