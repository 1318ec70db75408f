"""LogSource: a replayable source over a partitioned message log, after Flink's FLIP-27 `KafkaSource`.

The framework a log adapter (`LogClient`) plugs into; JetStream and Redis Streams ship with
Epochal, and a Kafka adapter would be the same few calls. It maps a log onto Epochal's source
contract (`api.connector`) without a mechanism of its own:

- **A partition is a split**, its id the partition's name, and **its cursor is the split's
  position** in the checkpoint (dissertation §3.4: source state is an offset into a durable,
  sequenced log), so a restore rereads exactly what came after the checkpoint.
- **Partitions are found while the job runs** by the job master's split enumerator
  (`discovery_interval`, `runtime.master.enumerator`): one listing of the log per interval, on
  the driver, each new partition handed to one subtask exactly once, across failures and
  rescales. Its starting cursor is fixed when it is first listed and travels with the split in
  the checkpointed split log, so every attempt starts it at the same record.
- **Where reading starts**: the partitions of the first listing from `start` ("earliest",
  "latest", a time, or the cursors a `group` acknowledged); partitions found later from their
  earliest record, as Flink does since FLIP-288, since every record of a partition created after
  the job started is new (starting them at "latest" would lose what was appended before they
  were found). A job resumed from a checkpoint reads every split of its log from its position.
- **Watermarks per partition, with idleness**: a split's watermark trails its own timestamps and
  an idle one stops holding the others back (`runtime.watermarks`, `WatermarkStrategy`): pass
  `metadata=("timestamp",)` to have the log's own time as a column.
- **Acknowledgements** (`acknowledge=True`): once a checkpoint completes, each open reader stores
  its split's cursor of that checkpoint in the log under `group` (Kafka's committed offsets, as
  Flink's source commits them), through `SplitReader.notify_checkpoint_complete`, for monitoring
  tools; recovery never reads them back. A partition a bounded job read to its end is
  acknowledged up to the last checkpoint that completed while it was being read.
- **Bounded mode** (`bounded=True`): every partition is read up to the end it had when the job
  started (resolved once, on the driver, by the start checks), then the job ends: for tests and
  backfills. The stop travels in each split's position, so a resumed backfill stops there too.
- **Arrow batches out**: payloads decoded by a `RecordFormat` (JSON, Avro, raw bytes).
"""

from __future__ import annotations

import datetime as dt
import logging
from abc import abstractmethod
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from ...api.connector import Source, SourceSplit, SplitReader
from ...errors import EpochalError
from ...validation import check_bool, check_name, check_seconds
from .client import Fetched, LogClient
from .formats import RecordFormat
from .reader import LogPosition, LogSplit, LogSplitReader

__all__ = ["LogSource", "METADATA"]

log = logging.getLogger(__name__)

METADATA = ("partition", "offset", "timestamp", "key")  # columns a log source can add to the payload's
_STARTS = ("earliest", "latest", "committed")


class LogSource(Source):
    """A source over the partitions of a message log; subclasses say how to connect to it.

    Args:
        format: how a payload becomes a row (`JsonFormat(schema)`, `AvroFormat(schema)`,
            `RawFormat()`).
        start: where the partitions found when the job starts are read from: `"earliest"`,
            `"latest"` (only what is appended after the start), `"committed"` (the cursors
            `group` acknowledged; the earliest where it has none), or a time (a `datetime`,
            or seconds since the epoch): the first record the log stamped at or after it.
        bounded: read every partition up to the end it had at the start, then end.
        discover: seconds between listings of the partitions (unbounded mode).
        group: the name under which cursors are acknowledged and read back for
            `start="committed"`.
        acknowledge: after each complete checkpoint, store its cursors under `group`.
        metadata: columns to add after the payload's: any of `"partition"`, `"offset"`,
            `"timestamp"` (the log's time, UTC) and `"key"` (where the log has keys).
        poll_interval: seconds a subtask waits before it asks an idle partition again.
        unavailable_timeout: seconds a server may be unreachable before the job fails
            (meanwhile the reads wait, and resume where they stopped).
    """

    def __init__(
        self,
        format: RecordFormat,
        *,
        start: str | float | dt.datetime = "earliest",
        bounded: bool = False,
        discover: float = 5.0,
        group: str | None = None,
        acknowledge: bool = False,
        metadata: Sequence[str] = (),
        poll_interval: float = 0.02,
        unavailable_timeout: float = 60.0,
    ) -> None:
        if not isinstance(format, RecordFormat):
            raise TypeError(f"format must be a RecordFormat (JsonFormat, AvroFormat, RawFormat), got {format!r}")
        self.format = format
        self.start = _check_start(start)
        self.bounded = check_bool("bounded", bounded)
        self.discover = check_seconds("discover", discover)
        self.group = None if group is None else check_name("group", group)
        self.acknowledges = check_bool("acknowledge", acknowledge)
        if (self.acknowledges or self.start == "committed") and self.group is None:
            raise ValueError('acknowledge=True and start="committed" need a group (group="my-job")')
        self.metadata = tuple(metadata)
        for name in self.metadata:
            if name not in METADATA:
                raise ValueError(f"metadata: {name!r} is not one of {METADATA}")
            if name in format.schema.names:
                raise ValueError(f"metadata: the payload's schema has a column {name!r} already")
        self.poll_interval = check_seconds("poll_interval", poll_interval)
        self.unavailable_timeout = check_seconds("unavailable_timeout", unavailable_timeout)
        self._found: dict[str, LogSplit] = {}  # the splits listed so far (on the job master), by partition
        self._resumed = False  # the job resumed a checkpoint's split log: every new partition is new
        self._listed = False  # a listing succeeded: later partitions are read from their start
        self._bounded: list[LogSplit] | None = None  # bounded mode: the splits and their stops, fixed once
        self._client: LogClient | None = None  # the job master's connection (never pickled)
        self._acker: LogClient | None = None  # a subtask's connection for acknowledgements

    # -- what an adapter says ------------------------------------------------------------------------
    @abstractmethod
    def connect(self) -> LogClient:
        """A new connection to the log (called in the process that uses it)."""

    @abstractmethod
    def describe(self) -> str:
        """The source and its server in a few words, for errors and logs."""

    def transient_errors(self) -> tuple[type[BaseException], ...]:
        """The client library's errors that mean "cannot reach the server now"."""
        return ()

    # -- the Source contract --------------------------------------------------------------------------
    endless_splits = True  # a partition never ends (but in bounded mode): read them all in turns

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_client": None, "_acker": None}  # connections stay in their process

    @property
    def schema(self) -> pa.Schema:
        """The schema of the batches the source hands out: the payload's, then the metadata."""
        client_types = self._metadata_types()
        return pa.schema([*self.format.schema, *(pa.field(n, client_types[n]) for n in self.metadata)])

    def discovery_interval(self) -> float | None:
        return None if self.bounded else self.discover

    def check(self) -> None:
        """Fail before the job starts if the log cannot be reached or listed; bounded mode fixes
        its stops here, once, on the driver."""
        try:
            if self.bounded:
                self._bounded_splits()
            else:
                self._list()
        except EpochalError:
            raise
        except Exception as exc:
            self._drop_client()
            raise EpochalError(f"{self.describe()}: cannot list the partitions: {type(exc).__name__}: {exc}") from exc

    def splits(self) -> Sequence[SourceSplit]:
        if self.bounded:
            return list(self._bounded_splits())
        try:
            return self._list()
        except Exception:
            self._drop_client()  # a connection that failed is made again at the next listing
            raise

    def resumed(self, splits: Sequence[Any]) -> None:
        """The job master restored the split log of a checkpoint: those partitions resume from
        their positions, and every partition not in it is new (read from its start)."""
        self._resumed = True
        # the start checks listed the log before the job master restored the log: what they
        # resolved for partitions the checkpoint does not know was resolved as at a fresh start
        self._found = {split.partition: split for split in splits}

    def open_split(self, split: Any, position: Any | None) -> SplitReader:
        if isinstance(position, LogPosition):
            return LogSplitReader(self, split, position.cursor, position.stop)
        return LogSplitReader(self, split, split.start, split.stop)

    def acknowledge(self, checkpoint_id: int, cursors: Mapping[str, Any]) -> None:
        """Checkpoint `checkpoint_id` completed with these cursors (by partition): store them
        under the group. A reader calls it from `SplitReader.notify_checkpoint_complete`, on its
        task; monitoring only, so a failure is logged, never raised."""
        if not self.acknowledges or self.group is None or not cursors:
            return
        try:
            if self._acker is None:
                self._acker = self.connect()
            self._acker.acknowledge(self.group, cursors)
        except Exception as exc:  # noqa: BLE001 - acknowledgements are for monitoring only
            log.warning("%s: acknowledging checkpoint %d failed (monitoring only, nothing is lost): %s: %s",
                        self.describe(), checkpoint_id, type(exc).__name__, exc)
            acker, self._acker = self._acker, None
            if acker is not None:
                acker.close()

    # -- listing and starting points ------------------------------------------------------------------
    def _connection(self) -> LogClient:
        if self._client is None:
            self._client = self.connect()
        return self._client

    def _drop_client(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            try:
                client.close()
            except Exception as exc:  # noqa: BLE001 - already broken
                log.debug("closing a log client: %s", exc)

    def _list(self) -> list[LogSplit]:
        """Every partition there is now, the new ones with their starting cursor fixed."""
        client = self._connection()
        initial = not self._listed and not self._resumed
        out = []
        for partition in sorted(client.partitions()):
            split = self._found.get(partition)
            if split is None:
                start = self._start_of(client, partition) if initial else client.earliest(partition)
                split = self._found[partition] = LogSplit(partition, partition, start)
            out.append(split)
        self._listed = True
        return out

    def _bounded_splits(self) -> list[LogSplit]:
        if self._bounded is None:
            client = self._connection()
            self._bounded = [
                LogSplit(p, p, self._start_of(client, p), client.latest(p)) for p in sorted(client.partitions())
            ]
            self._drop_client()
        return self._bounded

    def _start_of(self, client: LogClient, partition: str) -> Any:
        start = self.start
        if start == "earliest":
            return client.earliest(partition)
        if start == "latest":
            return client.latest(partition)
        if start == "committed":
            assert self.group is not None
            committed = client.committed(partition, self.group)
            return client.earliest(partition) if committed is None else committed
        return client.at_time(partition, float(start))

    # -- decoding -------------------------------------------------------------------------------------
    def _metadata_types(self) -> dict[str, pa.DataType]:
        offset_type, key_type = self.column_types()
        return {"partition": pa.string(), "offset": offset_type, "timestamp": pa.timestamp("us", tz="UTC"),
                "key": key_type}

    def column_types(self) -> tuple[pa.DataType, pa.DataType]:
        """The types of the `offset` and `key` metadata columns (the adapter's)."""
        return pa.int64(), pa.string()

    def with_metadata(
        self, batch: pa.RecordBatch, partition: str, fetched: Fetched, rows: Sequence[int]
    ) -> pa.RecordBatch:
        """The payload's rows (of the fetched records `rows`) and the metadata columns asked for."""
        if not self.metadata:
            return batch
        columns, fields = list(batch.columns), list(batch.schema)
        offset_type, key_type = self.column_types()
        index = np.asarray(rows, dtype=np.int64)
        for name in self.metadata:
            if name == "partition":
                column = pa.array([partition] * len(index), pa.string())
            elif name == "offset":
                column = pa.array([fetched.offsets[i] for i in index], offset_type)
            elif name == "timestamp":
                micros = (np.asarray(fetched.timestamps, dtype=np.float64)[index] * 1e6).astype(np.int64)
                column = pa.array(micros, pa.int64()).cast(pa.timestamp("us", tz="UTC"))
            else:
                keys = fetched.keys or [None] * len(fetched.payloads)
                column = pa.array([keys[i] for i in index], key_type)
            columns.append(column)
            fields.append(pa.field(name, column.type))
        return pa.RecordBatch.from_arrays(columns, schema=pa.schema(fields))


def _check_start(start: object) -> str | float:
    if isinstance(start, str):
        if start not in _STARTS:
            raise ValueError(f"start must be one of {_STARTS}, a datetime or seconds since the epoch; got {start!r}")
        return start
    if isinstance(start, dt.datetime):
        if start.tzinfo is None:
            start = start.replace(tzinfo=dt.UTC)  # a naive time is UTC, as the logs stamp
        return start.timestamp()
    if isinstance(start, (int, float)) and not isinstance(start, bool):
        return float(start)
    raise TypeError(f"start must be one of {_STARTS}, a datetime or seconds since the epoch; got {start!r}")
