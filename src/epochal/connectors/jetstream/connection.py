"""A NATS connection as the JetStream connectors use it: made on the process's loop, quiet,
reconnecting, and errors that mean "the server is away" told apart from the others.

Also the key-value buckets where the connectors keep their small records: the cursors a
source acknowledges for a group (`EPOCHAL_OFFSETS`, read by `start="committed"` and by
monitoring) and each sink writer's last committed checkpoint (`EPOCHAL_SINKS`).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Coroutine, Sequence
from typing import Any, TypeVar

from ..log.client import LogUnavailable
from .loop import run

__all__ = ["OFFSETS_BUCKET", "SINKS_BUCKET", "Connection", "kv_key", "transient_errors"]

log = logging.getLogger(__name__)

T = TypeVar("T")

OFFSETS_BUCKET = "EPOCHAL_OFFSETS"
SINKS_BUCKET = "EPOCHAL_SINKS"
_TIMEOUT = 5.0  # seconds a request to the server may take before it counts as unanswered
_KEY_CHARS = re.compile(r"[^-_a-zA-Z0-9]")


def transient_errors() -> tuple[type[BaseException], ...]:
    """nats-py's errors that mean the server cannot be reached (or JetStream is not up yet)."""
    import nats.errors as ne
    import nats.js.errors as je

    return (
        ne.NoServersError, ne.ConnectionClosedError, ne.ConnectionReconnectingError, ne.StaleConnectionError,
        ne.TimeoutError, ne.NoRespondersError, ne.FlushTimeoutError, ne.OutboundBufferLimitError,
        je.ServiceUnavailableError, LogUnavailable, TimeoutError, ConnectionError, OSError,
    )


def kv_key(*parts: str) -> str:
    """A key-value key of `parts`, each escaped to the characters keys allow, joined by dots."""
    return ".".join(_KEY_CHARS.sub(lambda m: f"={ord(m.group()):02x}", p) for p in parts)


class Connection:
    """One NATS connection on the process's loop; `call` runs a coroutine against it."""

    def __init__(self, servers: Sequence[str], what: str) -> None:
        self.servers = list(servers)
        self.what = what
        self.nc: Any = None
        self.reconnects = 0  # counted by the reconnect callback: pulls made before are stale
        self._buckets: dict[str, Any] = {}  # key-value handles, made once per connection
        self.call(self._open(), "connecting")

    async def _open(self) -> None:
        import nats

        async def quiet(*_: Any) -> None:
            return None

        async def reconnected() -> None:
            self.reconnects += 1

        try:
            # a few reconnects (about a second) ride out a blip; after them the connection
            # closes, and the framework's retries make a new one for as long as it may wait
            self.nc = await nats.connect(
                self.servers, connect_timeout=2, allow_reconnect=True, max_reconnect_attempts=4,
                reconnect_time_wait=0.25, error_cb=quiet, disconnected_cb=quiet, closed_cb=quiet,
                reconnected_cb=reconnected, pending_size=64 * 1024 * 1024, name="epochal",
            )
        except Exception as exc:  # noqa: BLE001 - nats-py raises several kinds for "not there"
            raise LogUnavailable(f"cannot connect to {', '.join(self.servers)}: {type(exc).__name__}: {exc}") from exc

    @property
    def js(self) -> Any:
        return self.nc.jetstream(timeout=_TIMEOUT)

    def call(self, coroutine: Coroutine[Any, Any, T], what: str, timeout: float = _TIMEOUT * 2) -> T:
        """Run `coroutine` on the loop; the server's absence becomes `LogUnavailable`."""
        try:
            return run(coroutine, timeout, f"{self.what}: {what}")
        except LogUnavailable:
            raise
        except transient_errors() as exc:
            raise LogUnavailable(f"{self.what}: {what}: {type(exc).__name__}: {exc}") from exc

    def close(self) -> None:
        nc, self.nc = self.nc, None
        if nc is not None and not nc.is_closed:
            try:
                run(nc.close(), _TIMEOUT, f"{self.what}: closing")
            except Exception as exc:  # noqa: BLE001 - gone anyway
                log.debug("%s: closing: %s", self.what, exc)

    # -- the key-value buckets ------------------------------------------------------------------------
    async def kv(self, bucket: str) -> Any:
        import nats.js.errors as je
        from nats.js.api import KeyValueConfig

        if (store := self._buckets.get(bucket)) is None:
            js = self.js
            try:
                store = await js.key_value(bucket)
            except je.BucketNotFoundError:
                store = await js.create_key_value(KeyValueConfig(bucket=bucket, history=1))
            self._buckets[bucket] = store
        return store

    async def kv_get(self, bucket: str, key: str) -> bytes | None:
        import nats.js.errors as je

        store = await self.kv(bucket)
        try:
            entry = await store.get(key)
        except (je.KeyNotFoundError, je.KeyDeletedError):
            return None
        value: bytes | None = entry.value
        return value

    async def kv_put(self, bucket: str, key: str, value: bytes) -> None:
        store = await self.kv(bucket)
        await store.put(key, value)
