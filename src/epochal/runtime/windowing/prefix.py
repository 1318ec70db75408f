"""Prefix sums of a slice table's counts (and integer sums) along its columns, kept across firings.

Cutty's `lookup(start, end)` (dissertation §5.5.2, Algorithm 8) for an invertible aggregate is a
difference of two prefix sums. A table's firings read columns that ended by their watermark, which
only late rows change, so the sums are kept from firing to firing and each column is summed once:
column `j` of a sum matrix holds, per slot, the sum of the live columns before `j`, valid for
`c0 <= j <= to`, for the slots `[0, rows)` they were summed for. Slots added since (new keys, or
keys that took an idle key's slot) are summed afresh up to `to` before the sums move on.
The layout, `sums[column, slot]`, keeps a column's sums contiguous: firings gather whole columns.
"""

from __future__ import annotations

import numpy as np

# Up to this many new columns are summed one by one (one pass over the keys each); more at once.
_FEW_COLUMNS = 8


class KeptPrefixSums:
    """The sums of one table; `forget` whenever its columns or slots move in a way the sums do
    not follow (a reshape, a compaction, a restore), `stale_from` when a late row changes a cell."""

    __slots__ = ("counts", "values", "to", "rows")

    def __init__(self) -> None:
        self.counts: np.ndarray | None = None
        self.values: np.ndarray | None = None  # of integer sums only (floats are summed per firing)
        self.to = -1  # valid from the first live column up to this column; -1: nothing kept
        self.rows = 0

    def drop(self) -> None:
        """Free the matrices (the table's shape changed): the next call allocates them anew."""
        self.counts = self.values = None
        self.to = -1

    def forget(self) -> None:
        self.to = -1

    def stale_from(self, column: int) -> None:
        """A cell of `column` changed: the sums after it are summed again when next read."""
        self.to = min(self.to, column)

    def shift(self, c0: int, n: int) -> None:
        """The table moved its live columns from `c0` to 0: the kept sums move along."""
        if self.counts is None or self.to < c0:
            self.to = -1
            return
        for sums in (self.counts, self.values):
            if sums is not None:
                sums[:self.to - c0 + 1, :n] = sums[c0:self.to + 1, :n]
        self.to -= c0

    def update(self, counts: np.ndarray, values: np.ndarray | None, n: int, c0: int,
               upto: int) -> tuple[np.ndarray, np.ndarray | None]:
        """The sums of `counts` (and of integer `values`, if given) over slots `[0, n)`, valid from
        column `c0` to `upto` (absolute): only the columns and slots added since are summed."""
        rows, cols = counts.shape
        if self.counts is None or (values is not None and self.values is None):
            self.counts = np.zeros((cols + 1, rows), dtype=np.int64)
            self.values = np.zeros((cols + 1, rows), dtype=np.int64) if values is not None else None
            self.to = -1
        pairs = [(self.counts, counts)]
        if values is not None:
            assert self.values is not None
            pairs.append((self.values, values))
        if self.to < c0:
            for sums, _ in pairs:
                sums[c0, :n] = 0
            self.to = c0
        elif self.rows < n:  # slots new since: their sums, up to where the others' are kept
            new, to = slice(self.rows, n), self.to
            for sums, matrix in pairs:
                sums[c0, new] = 0
                if to > c0:
                    np.cumsum(matrix[new, c0:to].T, axis=0, out=sums[c0 + 1:to + 1, new])
        self.rows = n
        start = self.to
        if upto > start:
            for sums, matrix in pairs:
                if upto - start <= _FEW_COLUMNS:
                    for j in range(start, upto):
                        np.add(sums[j, :n], matrix[:n, j], out=sums[j + 1, :n])
                else:
                    out = sums[start + 1:upto + 1, :n]
                    np.cumsum(matrix[:n, start:upto].T, axis=0, out=out)
                    out += sums[start, :n]
            self.to = upto
        return self.counts, self.values if values is not None else None
