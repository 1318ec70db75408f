"""LogSink: exactly-once output to a message log, by a write-ahead log in the checkpoint and
idempotent epoch commits.

A message log has no transaction that one process could prepare and another commit (JetStream
2.9 and Redis have none that outlives a connection), so the sinks take the dissertation's
general route for stores without one (§4.1.4, Table 4.1 "DBMS non-MVCC"): a writer keeps the
messages of the current epoch, already encoded, and its pre-commit at a checkpoint seals them
into the committable, which the checkpoint stores with the sink's operator state (a write-ahead
log in local state). When the checkpoint completes, the commit appends them to the log
(dissertation §4.1.3, the two-phase epoch commit: nothing is visible before every task has
pre-committed). A commit cut short by a failure is issued again from the restored checkpoint, so
each adapter's `commit_epoch` must be idempotent:

- Redis: the epoch's entries and the writer's last committed epoch go in one MULTI/EXEC, and a
  commit of an epoch at or below it is skipped.
- JetStream: each message carries a `Nats-Msg-Id` of (sink, writer, subtask, checkpoint, index),
  so the server drops a repeat within its duplicate window, and the writer's last committed
  epoch is kept in a key-value bucket, so a repeat after the window is skipped too.

A writer's id is `<name>-<lineage>-s<subtask>`, the lineage the sink's checkpointed state
keeps (`SinkWriter.set_lineage`), as the Delta sink's app id is: the same across the restores of
one run, so an epoch the job master replays at its cut after a fallback to an older checkpoint
finds its commit marker and is skipped (the sink is idempotent per epoch); new for a fresh run,
whose checkpoint ids start at 1 again and would otherwise be taken for epochs committed already.
The committable carries the id of the writer that prepared it.
"""

from __future__ import annotations

import logging
import uuid
from abc import abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

import pyarrow as pa

from ...api.connector import Sink, SinkWriter
from ...runtime.wire.batches import batch_len, to_records
from ...runtime.wire.elements import Batch
from ...validation import check_name, check_seconds
from .client import LogUnavailable
from .formats import RecordFormat
from .retry import retrying

__all__ = ["EpochOutput", "LogSink"]

log = logging.getLogger(__name__)

Target = str | Callable[[Any], str]


@dataclass(frozen=True, slots=True)
class EpochOutput:
    """What one writer prepared at one checkpoint: its encoded messages, appended to the log
    when the checkpoint completes. `targets` is one target (subject, stream) for every message,
    or one per message."""

    writer: str
    subtask: int
    checkpoint_id: int
    payloads: tuple[bytes, ...]
    targets: str | tuple[str, ...]

    def target(self, i: int) -> str:
        return self.targets if isinstance(self.targets, str) else self.targets[i]


class LogSink(Sink):
    """A sink into a message log, exactly once; subclasses append an epoch idempotently.

    Args:
        format: how a record becomes a payload (`JsonFormat`, `AvroFormat`, `RawFormat`).
        target: where each message goes (a subject, a stream key), or a function of the
            record that says.
        name: the sink's name in its writers' ids (and so in message ids and commit markers).
        unavailable_timeout: seconds a commit waits for a server that is down before the job fails.
    """

    def __init__(self, format: RecordFormat, target: Target, *, name: str, unavailable_timeout: float) -> None:
        if not isinstance(format, RecordFormat):
            raise TypeError(f"format must be a RecordFormat (JsonFormat, AvroFormat, RawFormat), got {format!r}")
        if not (isinstance(target, str) and target) and not callable(target):
            raise TypeError(f"the target must be a non-empty string or a function of the record, got {target!r}")
        self.format = format
        self.target = target
        self.name = check_name("name", name)
        self.unavailable_timeout = check_seconds("unavailable_timeout", unavailable_timeout)

    @abstractmethod
    def describe(self) -> str:
        """The sink and its server in a few words, for errors and logs."""

    @abstractmethod
    def commit_epoch(self, epoch: EpochOutput) -> None:
        """Append `epoch`'s messages unless they are in the log already; raise `LogUnavailable`
        (or a `transient_errors` one) if the server cannot be reached."""

    def transient_errors(self) -> tuple[type[BaseException], ...]:
        return ()

    def reset(self) -> None:  # noqa: B027 - optional hook
        """Drop the connection after a failed try (the next try makes a new one)."""

    def create_writer(self, subtask: int, parallelism: int) -> SinkWriter:
        return _EpochWriter(self, subtask)

    def commit(self, committables: list[Any]) -> None:
        for epoch in committables:
            if epoch.payloads:
                retrying(partial(self.commit_epoch, epoch),
                         f"{self.describe()}, committing checkpoint {epoch.checkpoint_id} of {epoch.writer}",
                         self.unavailable_timeout,
                         self.transient_errors() + (LogUnavailable, ConnectionError, TimeoutError, OSError),
                         self.reset)

    def targets(self, batch: Batch, count: int) -> str | list[str]:
        """Each record's target (one string when it is the same for all)."""
        target = self.target
        if isinstance(target, str):
            return target
        records = to_records(batch) if isinstance(batch, pa.RecordBatch) else batch
        return [str(target(record)) for record in records]


class _EpochWriter(SinkWriter):
    """Encodes what it is given at once (so a bad record fails at `write`, where the error
    names it) and keeps the epoch's messages until the checkpoint seals them."""

    def __init__(self, sink: LogSink, subtask: int) -> None:
        self.sink = sink
        self.subtask = subtask
        self.writer = f"{sink.name}-{uuid.uuid4().hex[:16]}-s{subtask}"  # until `set_lineage`
        self._payloads: list[bytes] = []
        self._targets: list[str] = []
        self._one_target: str | None = sink.target if isinstance(sink.target, str) else None

    def set_lineage(self, lineage: str) -> None:
        self.writer = f"{self.sink.name}-{lineage}-s{self.subtask}"

    def write(self, batch: Batch) -> None:
        if not batch_len(batch):
            return
        payloads = self.sink.format.encode(batch)
        if self._one_target is None:
            targets = self.sink.targets(batch, len(payloads))
            self._targets.extend(targets if isinstance(targets, list) else [targets] * len(payloads))
        self._payloads.extend(payloads)

    def prepare_commit(self, checkpoint_id: int) -> EpochOutput | None:
        if not self._payloads:
            return None
        targets: str | tuple[str, ...] = self._one_target if self._one_target is not None else tuple(self._targets)
        epoch = EpochOutput(self.writer, self.subtask, checkpoint_id, tuple(self._payloads), targets)
        self._payloads, self._targets = [], []
        return epoch
