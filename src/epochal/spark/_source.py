"""The `epochal-state` PySpark data source (Spark 4 Python Data Source API)."""

from __future__ import annotations

import itertools
import os
import pickle
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import BinaryType, DataType, IntegerType, StringType, StructField, StructType

from ..errors import NoCheckpointError
from ..state.keygroups import KeyGroupRange
from ..state.manifest import Manifest
from ..state.reader import iter_state, open_checkpoint, operator_state
from .types import Unfit, infer_type, to_json, to_spark

SAMPLE = 100_000  # entries the key and value types are inferred from
JSON = "epochal.json"  # column metadata: the entries had no common type; the column is JSON text


def _column_type(field: StructField) -> DataType | None:
    """The type values are converted to; None: JSON text. (A string column of a schema the
    user gave holds str values as they are, and the JSON text of others.)"""
    return None if field.metadata.get(JSON) else field.dataType


def _convert(value: Any, kind: DataType | None) -> Any:
    return to_json(value) if kind is None else to_spark(value, kind)


def state_schema(key: DataType | None, value: DataType | None) -> StructType:
    """The columns: `key` and `value` typed (JSON text where the entries have no common type),
    their JSON text and their pickles always."""
    return StructType([
        StructField("key_group", IntegerType(), False),
        _typed("key", key),
        StructField("state", StringType(), False),
        _typed("value", value),
        StructField("key_json", StringType(), False),
        StructField("value_json", StringType(), False),
        StructField("key_pickle", BinaryType(), False),
        StructField("value_pickle", BinaryType(), False),
    ])


@dataclass(frozen=True)
class _KeyGroups(InputPartition):
    start: int
    end: int


def _typed(name: str, kind: DataType | None) -> StructField:
    """A typed column, or (no common type) one of JSON text, marked so in its metadata."""
    if kind is None:
        return StructField(name, StringType(), True, metadata={JSON: True})
    return StructField(name, kind, True)


class _StateReader(DataSourceReader):
    def __init__(self, manifest: Manifest, operator: str, schema: StructType) -> None:
        self.manifest = manifest
        self.operator = operator
        self.key_type = _column_type(schema["key"])
        self.value_type = _column_type(schema["value"])

    def partitions(self) -> list[InputPartition]:
        op = operator_state(self.manifest, self.operator)
        ranges = sorted({(st.key_group_start, st.key_group_end) for st in op.subtasks})
        return [_KeyGroups(start, end) for start, end in ranges] or [_KeyGroups(0, 0)]

    def read(self, partition: InputPartition) -> Iterator[tuple[Any, ...]]:
        assert isinstance(partition, _KeyGroups)
        if partition.start == partition.end:
            return
        for row in iter_state(self.manifest, self.operator, KeyGroupRange(partition.start, partition.end)):
            try:
                key, value = _convert(row.key, self.key_type), _convert(row.value, self.value_type)
            except Unfit as exc:
                raise Unfit(
                    f"epochal-state: operator {self.operator!r}, checkpoint {self.manifest.checkpoint_id}, key "
                    f"{row.key!r}: {exc} (the types were inferred from another checkpoint, or from the first "
                    f"{SAMPLE:,} entries); give .schema(...) with string columns to read JSON text"
                ) from exc
            yield (
                row.key_group,
                key,
                row.state,
                value,
                to_json(row.key),
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

    def schema(self) -> StructType:
        """Typed `key` and `value` columns, inferred from the checkpoint's entries."""
        manifest, operator = self._open()
        sample = list(itertools.islice(iter_state(manifest, operator), SAMPLE))
        return state_schema(infer_type(r.key for r in sample), infer_type(r.value for r in sample))

    def reader(self, schema: Any) -> DataSourceReader:
        manifest, operator = self._open()
        return _StateReader(manifest, operator, schema)

    def _open(self) -> tuple[Manifest, str]:
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
        return manifest, operator


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
