"""Datasets of Parquet files as replayable sources: a row group per split (as `ParquetSource`),
with the table's partition columns filled in from its metadata. Tables build on it: a Spark
catalog table's directory (`connectors.table`) and a Delta table at a version
(`connectors.delta.source`)."""

from __future__ import annotations

import posixpath
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from ..api.connector import Source, SplitReader
from ..errors import EpochalError
from .parquet_source import RowGroupReader, RowGroupSplit

if TYPE_CHECKING:
    import pyarrow.dataset as ds

__all__ = ["DatasetSource"]


class _RowGroupOfDataset(RowGroupReader):
    def __init__(self, source: DatasetSource, split: RowGroupSplit, position: int | None) -> None:
        super().__init__(split, position)
        self.source = source

    def load(self) -> pa.Table:
        return self.source.row_group(self.split)


class DatasetSource(Source):
    """The row groups of a pyarrow dataset of Parquet fragments (built once per process)."""

    def __init__(self, columns: Sequence[str] | None) -> None:
        self.columns = None if columns is None else [str(c) for c in columns]
        self._dataset: ds.Dataset | None = None
        self._fragments: dict[str, Any] = {}

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_dataset": None, "_fragments": {}}

    def build(self) -> ds.Dataset:
        raise NotImplementedError

    def dataset(self) -> ds.Dataset:
        if self._dataset is None:
            self._dataset = self.build()
            self._fragments = {f.path: f for f in self._dataset.get_fragments()}
        return self._dataset

    def splits(self) -> Sequence[RowGroupSplit]:
        self.dataset()
        out = []
        for path in sorted(self._fragments):
            name = posixpath.basename(posixpath.dirname(path)) + "/" + posixpath.basename(path)
            for i, group in enumerate(self._fragments[path].split_by_row_group()):
                out.append(RowGroupSplit(f"{name}#{i}", path, i, group.row_groups[0].num_rows))
        return out

    def row_group(self, split: RowGroupSplit) -> pa.Table:
        dataset = self.dataset()
        fragment = self._fragments.get(split.path)
        if fragment is None:
            raise EpochalError(f"{split.path}: no longer a file of the table (was it vacuumed?)")
        group = fragment.split_by_row_group()[split.row_group]
        return group.to_table(schema=dataset.schema, columns=self.columns)

    def open_split(self, split: Any, position: Any | None) -> SplitReader:
        return _RowGroupOfDataset(self, split, position)
