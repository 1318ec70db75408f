"""The `epochal-state` PySpark data source (Spark 4 Python Data Source API)."""

from __future__ import annotations

import json
import os
import pickle
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

from ..errors import NoCheckpointError
from ..state.keygroups import KeyGroupRange
from ..state.manifest import Manifest
from ..state.reader import iter_state, open_checkpoint, operator_state

SCHEMA = "key_group int, key string, state string, value string, key_pickle binary, value_pickle binary"


def to_json(obj: Any) -> str:
    """The JSON text of a key or value; objects JSON cannot hold appear as their `repr`."""
    try:
        return json.dumps(obj, default=repr, sort_keys=True)
    except (TypeError, ValueError):  # e.g. a dict with tuple keys, or NaN-free strictness
        return json.dumps(repr(obj))


@dataclass(frozen=True)
class _KeyGroups(InputPartition):
    start: int
    end: int


class _StateReader(DataSourceReader):
    def __init__(self, manifest: Manifest, operator: str) -> None:
        self.manifest = manifest
        self.operator = operator

    def partitions(self) -> list[InputPartition]:
        op = operator_state(self.manifest, self.operator)
        ranges = sorted({(st.key_group_start, st.key_group_end) for st in op.subtasks})
        return [_KeyGroups(start, end) for start, end in ranges] or [_KeyGroups(0, 0)]

    def read(self, partition: InputPartition) -> Iterator[tuple[Any, ...]]:
        assert isinstance(partition, _KeyGroups)
        if partition.start == partition.end:
            return
        for row in iter_state(self.manifest, self.operator, KeyGroupRange(partition.start, partition.end)):
            yield (
                row.key_group,
                to_json(row.key),
                row.state,
                to_json(row.value),
                pickle.dumps(row.key, protocol=5),
                pickle.dumps(row.value, protocol=5),
            )


class EpochalStateDataSource(DataSource):
    """`spark.read.format("epochal-state")`: the keyed state of one operator of a checkpoint.

    Options: `operator` (required: the operator's uid), `checkpoint` (an id; default the latest
    complete checkpoint that verifies), and the path given to `load()`: a checkpoint directory
    or a savepoint directory (an absolute local path or a pyarrow filesystem URI every executor
    can read). Works from classic and Spark Connect sessions alike: Spark runs `reader()` in a
    Python process of its own on the driver, so a relative path is resolved there, not in the
    caller's directory (under Connect, in a directory of the session's on the server).
    """

    @classmethod
    def name(cls) -> str:
        return "epochal-state"

    def schema(self) -> str:
        return SCHEMA

    def reader(self, schema: Any) -> DataSourceReader:
        path = self.options.get("path")
        operator = self.options.get("operator")
        if not path:
            raise ValueError("epochal-state: give the checkpoint directory to load(PATH)")
        if not operator:
            raise ValueError('epochal-state: .option("operator", UID) is required')
        given = path
        if "://" not in path:
            path = os.path.abspath(path)
        try:
            manifest = open_checkpoint(path, _checkpoint_id(self.options.get("checkpoint")))
        except NoCheckpointError as exc:
            if "://" in given or os.path.isabs(given):
                raise
            # resolved where Spark plans the read: under Connect a session directory on the server
            raise NoCheckpointError(
                f"epochal-state: no checkpoint directory at the relative path {given!r}, resolved as {path!r} by "
                "the Spark process that plans the read (not your program): give an absolute path or a URI"
            ) from exc
        operator_state(manifest, operator)  # fail on the driver, with the known uids
        return _StateReader(manifest, operator)


def _checkpoint_id(option: str | None) -> int | None:
    """The `checkpoint` option as an id; None (the latest) when absent or "latest"."""
    if option in (None, "", "latest"):
        return None
    try:
        checkpoint_id = int(str(option))
    except ValueError:
        checkpoint_id = -1
    if checkpoint_id < 0:
        raise ValueError(f'epochal-state: option "checkpoint" must be a checkpoint id or "latest", got {option!r}')
    return checkpoint_id


def register(spark: Any) -> None:
    """Register the `epochal-state` data source with a SparkSession."""
    if not hasattr(spark, "dataSource"):
        raise TypeError(f"spark must be a SparkSession (Spark 4), got {spark!r} ({type(spark).__name__})")
    spark.dataSource.register(EpochalStateDataSource)
