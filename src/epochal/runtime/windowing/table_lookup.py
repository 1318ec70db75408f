"""Cutty's `lookup(start, end)` for many windows and many keys at once, from a slice table's matrices.

A window covers a run of columns (slices never straddle a window boundary, `edges`); its result
for every key (dissertation §5.5.2, Algorithm 8, `store.lookup`) is, for count and sum, a
difference of two prefix sums along the slice axis (two gathers and a subtraction per window;
integer sums from the sums `prefix.KeptPrefixSums` keeps across firings, float sums summed per
firing) and, for min and max, a reduction over the column range. A key has a result for a window
only if it had records there and, for a window fired again, a cell that late records changed.
Pure functions of the arrays they are given.
"""

from __future__ import annotations

from typing import Any

import numpy as np

_FEW_WINDOWS = 8  # up to this many windows, results are row differences, not a gather


def window_results(reduction: str, sums: np.ndarray, value_sums: np.ndarray | None, values: np.ndarray | None,
                   changed: np.ndarray | None, c0: int, rows: Any, a: np.ndarray, b: np.ndarray,
                   late: np.ndarray | None) -> tuple[np.ndarray | None, np.ndarray]:
    """(windows x keys: whether the key has a result, None if every one has; the results) of
    windows covering columns `[a[j], b[j])` of the live range (from column `c0`), ordered by end
    (`b` ascending), for the slots `rows` (a slice or an array).

    `sums` and `value_sums` are the kept prefix sums of the counts and of integer sums (or None),
    `sums[column, slot]`, valid up to column `c0 + b[-1]`; `late` marks windows fired again.
    """
    count = _differences(sums, rows, c0 + a, c0 + b)
    present: np.ndarray | None = None
    if late is not None and late.any():
        assert changed is not None
        present = count > 0
        lo, hi = int(a[late].min()), int(b[late].max())
        flags = _prefix(changed[rows, c0 + lo:c0 + hi], np.int64)
        present[late] &= ((flags[:, b[late] - lo] - flags[:, a[late] - lo]) > 0).T
        if present.all():
            present = None
    elif count.size and not int(count.min()):
        present = count > 0
    if reduction == "count":
        return present, count
    if value_sums is not None:  # integer sums: exact from the kept prefix sums
        return present, _differences(value_sums, rows, c0 + a, c0 + b)
    assert values is not None
    lo, hi = int(a.min()), int(b.max())
    block = values[rows, c0 + lo:c0 + hi]
    a, b = a - lo, b - lo
    if reduction == "sum":
        partial_sums = _prefix(block, values.dtype)
        return present, (partial_sums[:, b] - partial_sums[:, a]).T
    reduce = np.min if reduction == "min" else np.max
    result = np.empty((len(a), block.shape[0]), dtype=values.dtype)
    for j, (x, y) in enumerate(zip(a.tolist(), b.tolist())):
        result[j] = reduce(block[:, x:y], axis=1)
    return present, result


def _prefix(matrix: np.ndarray, dtype: Any) -> np.ndarray:
    """Per row, sums of the first j columns, j = 0 .. columns."""
    out = np.zeros((matrix.shape[0], matrix.shape[1] + 1), dtype=dtype)
    np.cumsum(matrix, axis=1, out=out[:, 1:])
    return out


def _columns(prefix: np.ndarray, rows: Any, cols: np.ndarray) -> np.ndarray:
    """`prefix[cols, rows]` (windows x keys) for a slice of rows or an array of them."""
    return prefix[cols, rows] if isinstance(rows, slice) else prefix[np.ix_(cols, rows)]


def _differences(prefix: np.ndarray, rows: Any, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """`prefix[b] - prefix[a]` for the keys in `rows` (windows x keys): row by row for a few
    windows of every key (views, no gather), else by gathers."""
    if isinstance(rows, slice) and len(a) <= _FEW_WINDOWS:
        out = np.empty((len(a), rows.stop - rows.start), dtype=prefix.dtype)
        for j, (x, y) in enumerate(zip(a.tolist(), b.tolist())):
            np.subtract(prefix[y, rows], prefix[x, rows], out=out[j])
        return out
    return _columns(prefix, rows, b) - _columns(prefix, rows, a)
