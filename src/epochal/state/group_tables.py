"""Columnar keyed state: one entry per key group holding a whole table of keys and their values.

Why: a columnar operator keeps its working state in numpy (one row per key); writing it into
keyed state one Python entry per key cost as much as the records themselves (issue 36: the
columnar word count's checkpoints took a fifth of its time). So such an operator writes one
entry per key group, keyed by the key group's number, holding the group's keys as one Arrow
array and each state's values as columns. It checkpoints, restores, rescales and migrates with
its key group like any entry (dissertation §4.2).

Readers see per-key state all the same: `expand` turns a `GroupTable` entry into the rows the
per-key path would hold (`state/reader.py` does, so `read_state`, `lookup` and the Spark data
source show keys, not tables).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

GROUP_TABLE_STATE = "__aggregates__"  # the state a GroupTable is kept in, keyed by key group


@dataclass(frozen=True, slots=True)
class GroupTable:
    """One key group's columnar state: `keys[i]`'s value of state `name` is built from row i of
    the columns `states[name]` names (one column: the scalar; several: a tuple of them).

    Never changed once written: the next checkpoint writes a new one.
    """

    keys: pa.Array
    columns: dict[str, np.ndarray]
    states: tuple[tuple[str, tuple[str, ...]], ...]

    def __len__(self) -> int:
        return len(self.keys)

    def values(self, name: str) -> list[Any]:
        """Every key's value of state `name`, in row order."""
        columns = dict(self.states)[name]
        if len(columns) == 1:
            values: list[Any] = self.columns[columns[0]].tolist()
            return values
        return list(zip(*(self.columns[c].tolist() for c in columns)))

    def rows(self) -> Iterator[tuple[Any, str, Any]]:
        """`(key, state name, value)` of every key and state, as the per-key path keeps them."""
        keys = self.keys.to_pylist()
        for name, _ in self.states:
            yield from ((k, name, v) for k, v in zip(keys, self.values(name)))


def expand(key_group: int, name: str, key: Any, value: Any) -> Iterator[tuple[Any, str, Any]]:
    """The per-key entries one stored entry stands for: a `GroupTable`'s rows, else itself."""
    if name == GROUP_TABLE_STATE and isinstance(value, GroupTable) and key == key_group:
        yield from value.rows()
    else:
        yield key, name, value
