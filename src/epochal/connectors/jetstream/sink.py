"""JetStreamSink: records published to JetStream exactly once, committed at the checkpoint.

The log sinks' two-phase epoch commit (`connectors.log.sink`, dissertation §4.1.3 and §4.1.4):
an epoch's messages wait in the checkpoint until it completes, then are published. A commit can
be repeated (a failure cut it short, or came before the completion notice ended), so it is
made idempotent twice over:

1. Every message carries `Nats-Msg-Id: <writer>-<checkpoint>-<index>` (the writer id holds the
   sink's name, a random token of the attempt and the subtask), so within the stream's
   *duplicate window* the server stores a repeat of it once (`PubAck.duplicate`).
2. Once every message of an epoch is acknowledged, the writer's last committed checkpoint goes
   to the key-value bucket `EPOCHAL_SINKS`; a commit of an epoch at or below it publishes
   nothing. So a commit repeated long after the first, beyond any window, adds nothing.

The window must therefore cover the one gap the marker leaves: from a failure *during* a commit
(messages published, marker not yet written) to the restarted job's repeat of that commit, i.e.
failure detection, restart and restore (seconds on Spark; longer if a driver must be restarted
by hand). JetStream's default window is 2 minutes; set `duplicate_window` on the stream to
cover the longest outage you will resume from.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Sequence
from typing import Any

from ...errors import EpochalError
from ..extras import require
from ..log.client import LogUnavailable
from ..log.formats import RecordFormat
from ..log.sink import EpochOutput, LogSink, Target
from .connection import SINKS_BUCKET, Connection, kv_key, transient_errors

__all__ = ["JetStreamSink"]

_ACKS_PER_SECOND = 5_000  # the slowest acknowledgement rate a commit allows for before it retries


class JetStreamSink(LogSink):
    """Publishes records to JetStream subjects, exactly once per checkpoint.

    Args:
        servers: the NATS server URL(s).
        subject: the subject of every message, or a function of the record that returns it.
            A stream must capture the subject(s) (the start checks say so if none does).
        format: how a record becomes a payload (`JsonFormat(schema)`: a JSON object per
            record, `AvroFormat`, `RawFormat()`).
        name: the sink's name in message ids and commit markers.
        unavailable_timeout: seconds a commit waits for a server that is down before the job
            fails (and restarts from its latest checkpoint, which commits again).

    Mind the stream's duplicate window (module docstring): it must cover a failure during a
    commit and the restart that repeats it.
    """

    def __init__(
        self,
        servers: str | Sequence[str],
        subject: Target,
        format: RecordFormat,
        *,
        name: str = "epochal",
        unavailable_timeout: float = 60.0,
    ) -> None:
        require("nats", "JetStreamSink")  # one line, before Spark starts, if the extra is missing
        super().__init__(format, subject, name=name, unavailable_timeout=unavailable_timeout)
        self.servers = [servers] if isinstance(servers, str) else list(servers)
        self._conn: Connection | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_conn": None}

    def describe(self) -> str:
        subject = self.target if isinstance(self.target, str) else "<per record>"
        return f"JetStreamSink({', '.join(self.servers)}, subject {subject})"

    def transient_errors(self) -> tuple[type[BaseException], ...]:
        return transient_errors()

    def _connection(self) -> Connection:
        if self._conn is None:
            self._conn = Connection(self.servers, self.describe())
        return self._conn

    def reset(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()

    def check(self, resuming: bool) -> None:
        """Fail before the job starts if the server is not there, or no stream captures the subject."""
        try:
            conn = self._connection()
            if isinstance(self.target, str):
                conn.call(conn.js.find_stream_name_by_subject(self.target), "finding the subject's stream")
        except LogUnavailable as exc:
            raise EpochalError(f"{self.describe()}: {exc}") from exc
        except Exception as exc:
            if type(exc).__name__ == "NotFoundError":
                raise EpochalError(f"{self.describe()}: no JetStream stream captures subject {self.target!r}; "
                                   "create one first (e.g. `nats stream add`)") from exc
            raise EpochalError(f"{self.describe()}: {type(exc).__name__}: {exc}") from exc
        finally:
            self.reset()  # the driver's connection is not the writers'

    def commit_epoch(self, epoch: EpochOutput) -> None:
        conn = self._connection()
        budget = 10.0 + len(epoch.payloads) / _ACKS_PER_SECOND
        conn.call(self._commit(conn, epoch, budget), f"publishing checkpoint {epoch.checkpoint_id}",
                  timeout=budget + 10.0)

    async def _commit(self, conn: Connection, epoch: EpochOutput, budget: float) -> None:
        key = kv_key(epoch.writer)
        marker = await conn.kv_get(SINKS_BUCKET, key)
        if marker is not None and int(marker) >= epoch.checkpoint_id:
            return  # committed before: a repeat after a failure
        await self._publish(conn, epoch, budget)
        await conn.kv_put(SINKS_BUCKET, key, str(epoch.checkpoint_id).encode())

    async def _publish(self, conn: Connection, epoch: EpochOutput, budget: float) -> None:
        """Publish every message of `epoch` with its id, and wait until the stream stored each
        (or took it for a duplicate); an answer that is an error fails the commit."""
        nc = conn.nc
        inbox = f"_EPOCHAL.{uuid.uuid4().hex}"
        expected = len(epoch.payloads)
        acks: list[bytes] = []
        errors: list[str] = []
        done = asyncio.Event()

        async def on_ack(msg: Any) -> None:
            status = (msg.headers or {}).get("Status") if msg.headers else None
            if status:  # 503: no stream captures the subject
                errors.append(f"status {status} {(msg.headers or {}).get('Description', '')}".strip())
            else:
                acks.append(msg.data)
            if len(acks) + len(errors) >= expected:
                done.set()

        sub = await nc.subscribe(inbox, cb=on_ack, pending_msgs_limit=1 << 20, pending_bytes_limit=256 << 20)
        try:
            prefix = f"{epoch.writer}-{epoch.checkpoint_id}-"
            for i, payload in enumerate(epoch.payloads):
                await nc.publish(epoch.target(i), payload, reply=inbox, headers={"Nats-Msg-Id": f"{prefix}{i}"})
            await nc.flush(timeout=budget)
            deadline = time.monotonic() + budget
            while not done.is_set():
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise LogUnavailable(f"{len(acks) + len(errors)} of {expected} messages acknowledged "
                                         f"within {budget:.0f} s")
                try:
                    await asyncio.wait_for(done.wait(), remaining)
                except TimeoutError:
                    continue
        finally:
            await sub.unsubscribe()
        failed = errors + [a.decode(errors="replace") for a in acks if b'"error"' in a]
        if failed:
            if all(e.startswith("status 503") for e in failed):  # tried again: JetStream may be starting
                raise LogUnavailable(f"no JetStream stream captures the subject(s) of {len(failed)} message(s) "
                                     f"of checkpoint {epoch.checkpoint_id} (or JetStream is not up yet)")
            raise EpochalError(f"{self.describe()}: the server refused {len(failed)} message(s) of checkpoint "
                               f"{epoch.checkpoint_id}: {failed[0]}")
