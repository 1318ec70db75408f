"""Helpers for testing stream programs: a list source with crash injection, a collecting sink,
throwaway message-log servers, and certificates for trying TLS.

The source and sink work with the in-process executor (`StreamEnvironment(executor="inprocess")`),
where the objects are shared with the running job; on Spark use files (`TextFileSource`,
`FileSink`) or a log server: `nats_server()` and `redis_server()` start Debian's `nats-server`
(JetStream) or `redis-server` on a free port of 127.0.0.1, data in a temporary directory, for the
length of a `with` block, so a test of a program over `JetStreamSource` or `RedisStreamSource`
runs against the real thing.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from .api.connector import Sink, SinkWriter, Source, SplitReader
from .config import TlsConfig
from .errors import InjectedFailure
from .runtime.wire.batches import to_records
from .runtime.wire.elements import Batch
from .validation import check_int, check_path

__all__ = ["Crash", "ListSource", "CollectSink", "make_test_certificates", "nats_server", "redis_server"]


T = TypeVar("T")  # a ListSource's records

class Crash:
    """A sentinel item for `ListSource`: raises `InjectedFailure` the first time it is read.

    After the restart the sentinel is skipped, so the job then runs to the end: the committed
    output must be that of a run without the crash.
    """

    def __init__(self) -> None:
        self.fired = False

    def __repr__(self) -> str:
        return f"Crash(fired={self.fired})"


@dataclass(frozen=True, slots=True)
class _ListSplit:
    split_id: str
    items: tuple[Any, ...]


class _ListReader(SplitReader):
    def __init__(self, split: _ListSplit, position: int | None) -> None:
        self.items = split.items
        self.index = position or 0

    def read(self, max_records: int) -> Batch | None:
        if self.index >= len(self.items):
            return None
        out: list[Any] = []
        while self.index < len(self.items) and len(out) < max_records:
            item = self.items[self.index]
            if isinstance(item, Crash):
                if not item.fired:
                    if out:
                        return out  # hand out what came before; crash on the next read
                    item.fired = True
                    raise InjectedFailure("Crash() sentinel reached")
                self.index += 1
                continue
            out.append(item)
            self.index += 1
        return out

    def position(self) -> int:
        return self.index


class ListSource(Source[T]):
    """A replayable source over a list, cut into `splits` contiguous splits.

    Args:
        items: the records; a `Crash()` among them fails the job once at that point.
        splits: how many splits (so how many source subtasks have work); at least 1.
        batch_size: records per batch at most (besides the environment's `batch_size`); `None`
            leaves it to the environment.
    """

    def __init__(self, items: Iterable[T], splits: int = 1, batch_size: int | None = None) -> None:
        if not isinstance(items, Iterable):
            raise TypeError(f"items must be an iterable of records, got {items!r} ({type(items).__name__})")
        records = list(items)
        n = check_int("splits", splits)
        if batch_size is not None:
            check_int("batch_size", batch_size)
        bounds = [len(records) * i // n for i in range(n + 1)]
        self._splits = [_ListSplit(f"list-{i}", tuple(records[bounds[i] : bounds[i + 1]])) for i in range(n)]
        self.batch_size = batch_size

    def splits(self) -> Sequence[_ListSplit]:
        return self._splits

    def open_split(self, split: Any, position: Any | None) -> SplitReader:
        reader = _ListReader(split, position)
        if self.batch_size is not None:
            inner, limit = reader.read, self.batch_size
            reader.read = lambda max_records: inner(min(max_records, limit))  # type: ignore[method-assign]
        return reader


class _CollectWriter(SinkWriter):
    def __init__(self, sink: CollectSink, subtask: int) -> None:
        self.sink = sink
        self.subtask = subtask
        self.lineage: str | None = None
        self.staged: list[Any] = []

    def set_lineage(self, lineage: str) -> None:
        self.lineage = lineage

    def write(self, batch: Batch) -> None:
        self.staged.extend(to_records(batch))

    def prepare_commit(self, checkpoint_id: int) -> Any:
        if not self.staged:
            return None
        token = next(self.sink._tokens)
        epoch = None if self.lineage is None else (self.lineage, self.subtask, checkpoint_id)
        with self.sink._lock:
            self.sink._prepared[token] = (epoch, self.staged)
        self.staged = []
        return token


class CollectSink(Sink):
    """Collects records in memory; `committed()` holds only what checkpoints committed, each
    epoch once (idempotent per epoch, as `FileSink`: an epoch replayed after a fallback to an
    older checkpoint is skipped)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._tokens = itertools.count()
        self._prepared: dict[int, tuple[Any, list[Any]]] = {}
        self._committed_tokens: set[int] = set()
        self._committed_epochs: set[Any] = set()  # (lineage, subtask, checkpoint id)
        self._committed: list[Any] = []

    def create_writer(self, subtask: int, parallelism: int) -> SinkWriter:
        return _CollectWriter(self, subtask)

    def commit(self, committables: list[Any]) -> None:
        with self._lock:
            for token in committables:
                if token in self._committed_tokens:
                    continue
                self._committed_tokens.add(token)
                epoch, records = self._prepared.pop(token)
                if epoch is not None and epoch in self._committed_epochs:
                    continue  # a replayed epoch, committed before
                if epoch is not None:
                    self._committed_epochs.add(epoch)
                self._committed.extend(records)

    def committed(self) -> list[Any]:
        """The committed records, in commit order."""
        with self._lock:
            return list(self._committed)


def make_test_certificates(directory: str | os.PathLike[str]) -> TlsConfig:
    """A throw-away certificate authority and one certificate it signed, for every process of a
    job, in `directory` (created); the `TlsConfig` that uses them. For tests and trying TLS on
    one machine, never for production: the keys are unencrypted files. Needs the `openssl`
    command (Debian's `openssl` package).
    """
    root = check_path("directory", directory)
    openssl = shutil.which("openssl")
    if openssl is None:
        raise RuntimeError("make_test_certificates needs the openssl command")
    os.makedirs(root, exist_ok=True)
    names = ("ca.key", "ca.pem", "node.key", "node.csr", "node.pem")
    ca_key, ca, key, csr, cert = (os.path.join(root, n) for n in names)
    extensions = os.path.join(root, "node.ext")
    with open(extensions, "w", encoding="ascii") as f:
        f.write("basicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\n"
                "extendedKeyUsage=serverAuth,clientAuth\nsubjectAltName=DNS:localhost,IP:127.0.0.1\n")
    curve = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    for command in (
        [openssl, "req", "-x509", *curve, "-keyout", ca_key, "-out", ca, "-days", "30", "-subj", "/CN=epochal test CA"],
        [openssl, "req", *curve, "-keyout", key, "-out", csr, "-subj", "/CN=epochal node"],
        [openssl, "x509", "-req", "-in", csr, "-CA", ca, "-CAkey", ca_key, "-CAcreateserial", "-out", cert,
         "-days", "30", "-extfile", extensions],
    ):
        subprocess.run(command, check=True, capture_output=True)
    return TlsConfig(cert, key, ca)


# -- throwaway log servers -------------------------------------------------------------------------
@contextlib.contextmanager
def nats_server() -> Iterator[str]:
    """A `nats-server -js` on a free port of 127.0.0.1 for the `with` block; yields its URL.

    What it runs is the one-liner a deployment would: `nats-server -js -a 127.0.0.1 -p PORT
    -sd DIR`, its data in a temporary directory removed at the end.

    Raises:
        FileNotFoundError: nats-server is not installed (`apt-get install nats-server`).
    """
    with _server("nats-server", "/usr/sbin/nats-server",
                 lambda port, data: ["-js", "-a", "127.0.0.1", "-p", str(port), "-sd", data]) as port:
        yield f"nats://127.0.0.1:{port}"


@contextlib.contextmanager
def redis_server() -> Iterator[str]:
    """A `redis-server` on a free port of 127.0.0.1 for the `with` block; yields its URL.

    It runs `redis-server --port PORT --bind 127.0.0.1 --dir DIR --appendonly yes` (an
    append-only file, so a restart keeps the streams), data in a temporary directory.

    Raises:
        FileNotFoundError: redis-server is not installed (`apt-get install redis-server`).
    """
    with _server("redis-server", "/usr/bin/redis-server",
                 lambda port, data: ["--port", str(port), "--bind", "127.0.0.1", "--dir", data,
                                     "--appendonly", "yes", "--save", ""]) as port:
        yield f"redis://127.0.0.1:{port}/0"


@contextlib.contextmanager
def _server(name: str, debian: str, arguments: Any) -> Iterator[int]:
    binary = shutil.which(name) or (debian if os.path.exists(debian) else None)
    if binary is None:
        raise FileNotFoundError(f"{name} is not installed (apt-get install {name})")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = int(probe.getsockname()[1])
    data = tempfile.mkdtemp(prefix=f"epochal-{name}-")
    process = subprocess.Popen([binary, *arguments(port, data)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break  # both servers listen only once ready (JetStream starts before the listener)
            except OSError:
                if time.monotonic() > deadline or process.poll() is not None:
                    raise RuntimeError(f"{binary} did not start on port {port}") from None
                time.sleep(0.02)  # the poll interval of a server starting
        yield port
    finally:
        process.terminate()
        process.wait(timeout=30)
        shutil.rmtree(data, ignore_errors=True)
