"""Real message-log servers for the connector tests: `nats-server` with JetStream and
`redis-server` (Debian's packages, which `.ci/run` installs), each started on 127.0.0.1 on a
free port with its data in a temporary directory, stopped (or killed and started again on the
same port and data, for the outage tests) by the test, and torn down at its end.

The helpers read and write through each server's own client (nats-py, redis-py), never through
Epochal, so a test's expected and committed output come from outside the code under test.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Coroutine, Iterable
from dataclasses import dataclass, field
from typing import Any, TypeVar

T = TypeVar("T")



def _binary(name: str, debian: str) -> str | None:
    """The server's binary on PATH, or where Debian's package puts it (/usr/sbin is not on
    every user's PATH)."""
    return shutil.which(name) or (debian if os.path.exists(debian) else None)


NATS_BINARY = _binary("nats-server", "/usr/sbin/nats-server")
REDIS_BINARY = _binary("redis-server", "/usr/bin/redis-server")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _wait_for(ready: Callable[[], bool], process: subprocess.Popen[bytes], what: str, log: str) -> None:
    deadline = time.monotonic() + 30
    while not ready():
        if process.poll() is not None or time.monotonic() > deadline:
            with open(log) as f:
                raise RuntimeError(f"{what} did not start: {f.read()[-2000:]}")
        time.sleep(0.02)  # the poll interval of a server starting


@dataclass
class _Server:
    binary: str
    directory: str
    port: int = field(default_factory=free_port)
    process: subprocess.Popen[bytes] | None = None

    def command(self) -> list[str]:
        raise NotImplementedError

    def ready(self) -> bool:
        raise NotImplementedError

    def start(self) -> None:
        os.makedirs(self.directory, exist_ok=True)
        log = os.path.join(self.directory, "server.log")
        with open(log, "ab") as out:
            self.process = subprocess.Popen(self.command(), stdout=out, stderr=subprocess.STDOUT)
        _wait_for(self.ready, self.process, type(self).__name__, log)

    def stop(self, sig: int = signal.SIGTERM) -> None:
        """Stop the server (SIGKILL: as a crash does); its data stays for `start`."""
        process, self.process = self.process, None
        if process is not None and process.poll() is None:
            process.send_signal(sig)
            process.wait(timeout=30)

    def restart(self, down: float = 0.0) -> None:
        self.stop()
        time.sleep(down)  # how long the server is away: what the test is about
        self.start()

    def _accepts(self) -> bool:
        try:
            socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
            return True
        except OSError:
            return False


# -- NATS JetStream --------------------------------------------------------------------------------
def run_async(coroutine: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coroutine)


@dataclass
class NatsServer(_Server):
    """`nats-server -js` on 127.0.0.1; the store directory survives a restart."""

    def command(self) -> list[str]:
        return [self.binary, "-js", "-a", "127.0.0.1", "-p", str(self.port), "-sd", os.path.join(self.directory, "js")]

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    def ready(self) -> bool:
        if not self._accepts():
            return False
        try:
            run_async(self._call(lambda js: js.account_info()))
            return True
        except Exception:  # noqa: BLE001 - JetStream is still starting
            return False

    async def _call(self, fn: Callable[[Any], Any]) -> Any:
        import nats

        nc = await nats.connect(self.url, connect_timeout=2, allow_reconnect=False)
        try:
            return await fn(nc.jetstream(timeout=5))
        finally:
            await nc.close()

    def add_stream(self, name: str, subjects: list[str], **config: Any) -> None:
        from nats.js.api import StreamConfig

        run_async(self._call(lambda js: js.add_stream(StreamConfig(name=name, subjects=subjects, **config))))

    def publish(self, messages: Iterable[tuple[str, bytes]]) -> list[int]:
        """Publish `(subject, payload)` pairs in order, each acknowledged; their stream sequences."""

        async def go(js: Any) -> list[int]:
            return [(await js.publish(subject, payload)).seq for subject, payload in messages]

        return run_async(self._call(go))

    def messages(self, stream: str) -> list[tuple[str, bytes, dict[str, str]]]:
        """Every message in `stream`, in order, as `(subject, payload, headers)`, read with the
        server's own client (a pull consumer of nats-py)."""

        async def go(js: Any) -> list[tuple[str, bytes, dict[str, str]]]:
            from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

            total = (await js.stream_info(stream)).state.messages
            out: list[tuple[str, bytes, dict[str, str]]] = []
            if not total:
                return out
            sub = await js.pull_subscribe(">", stream=stream, config=ConsumerConfig(
                deliver_policy=DeliverPolicy.ALL, ack_policy=AckPolicy.NONE, inactive_threshold=10))
            try:
                while len(out) < total:
                    for msg in await sub.fetch(min(1000, total - len(out)), timeout=5):
                        out.append((msg.subject, msg.data, dict(msg.headers or {})))
            finally:
                await sub.unsubscribe()
            return out

        return run_async(self._call(go))

    def kv_get(self, bucket: str, key: str) -> bytes | None:
        async def go(js: Any) -> bytes | None:
            import nats.js.errors as je

            try:
                return (await (await js.key_value(bucket)).get(key)).value
            except (je.KeyNotFoundError, je.BucketNotFoundError):
                return None

        return run_async(self._call(go))


# -- Redis -----------------------------------------------------------------------------------------
@dataclass
class RedisServer(_Server):
    """`redis-server` on 127.0.0.1 with an append-only file fsynced at every write, so a restart
    (even after SIGKILL) keeps every entry it acknowledged."""

    def command(self) -> list[str]:
        return [self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--dir", self.directory,
                "--appendonly", "yes", "--appendfsync", "always", "--save", "", "--daemonize", "no"]

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def ready(self) -> bool:
        if not self._accepts():
            return False
        try:
            return bool(self.client().ping())
        except Exception:  # noqa: BLE001 - loading its data
            return False

    def client(self) -> Any:
        import redis

        return redis.Redis.from_url(self.url, socket_timeout=10)

    def add(self, stream: str, payloads: Iterable[bytes], field: str = "data") -> list[str]:
        client = self.client()
        pipe = client.pipeline(transaction=False)
        for payload in payloads:
            pipe.xadd(stream, {field: payload})
        return [i.decode() for i in pipe.execute()]

    def entries(self, stream: str, field: str = "data") -> list[bytes]:
        """Every entry's payload in `stream`, in order, read with redis-py."""
        return [fields[field.encode()] for _, fields in self.client().xrange(stream)]
