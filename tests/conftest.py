"""Shared fixtures: the tests directory on sys.path, one local Spark driver per run (a classic
session, and a Spark Connect server and client on the same driver), a job's tasks built by
hand for tests that step them one at a time, and a real S3-compatible server (moto)."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from epochal.plan.job_graph import JobGraph, TaskId
from epochal.runtime.clock import VirtualClock
from epochal.runtime.task.task import Task
from epochal.runtime.task.wiring import build_tasks, local_channels

TESTS = os.path.dirname(os.path.abspath(__file__))
if TESTS not in sys.path:
    sys.path.insert(0, TESTS)


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """A classic local[2] SparkSession, started once: Spark start-up costs ~15 s on 2 cores."""
    from pyspark import cloudpickle

    import spark_jobs
    from epochal.cluster.spark import create_session

    # Spark workers cannot import modules from tests/: ship the job code by value.
    cloudpickle.register_pickle_by_value(spark_jobs)  # type: ignore[no-untyped-call]
    session = create_session("local[2]")
    yield session
    session.stop()


@pytest.fixture(scope="session")
def connect_url(spark: Any) -> str:
    """`sc://127.0.0.1:PORT`: a Spark Connect server on the driver of the `spark` session.

    It is what `SparkSession.builder.remote("local[2]")` starts (a local driver with the Connect
    service), sharing the classic session's JVM: one process cannot hold two drivers, and the
    tests need both kinds of session. Its executions stream back for at most 5 s before the
    client reattaches (Spark's default is 2 minutes), so every job tested also crosses reattaches.
    """
    import spark_jobs

    return spark_jobs.serve_connect(spark, {"spark.connect.execute.reattachable.senderMaxStreamDuration": "5s"})


@pytest.fixture(scope="session")
def spark_connect(connect_url: str) -> Iterator[Any]:
    """A Spark Connect client session of the `connect_url` server."""
    from pyspark.sql.connect.session import SparkSession as ConnectSession

    session = ConnectSession.builder.remote(connect_url).getOrCreate()
    yield session
    session.stop()


@pytest.fixture(scope="session", params=["classic", pytest.param("connect", marks=pytest.mark.connect)])
def any_spark(request: pytest.FixtureRequest) -> Any:
    """Each kind of local[2] session in turn: classic (`spark`) and Spark Connect (`spark_connect`)."""
    return request.getfixturevalue("spark" if request.param == "classic" else "spark_connect")


class _Deferred:
    """Background snapshot writes, kept and never run: the test steps only the tasks."""

    def __init__(self) -> None:
        self.pending: list[Callable[[], None]] = []

    def submit(self, work: Callable[[], Any], on_done: Callable[[Any], None]) -> None:
        self.pending.append(lambda: on_done(work()))

    read_ahead = submit


@pytest.fixture
def open_tasks() -> Iterator[Callable[[JobGraph], dict[TaskId, Task]]]:
    """`open_tasks(job)`: every task of `job` on local channels and a virtual clock, opened,
    without checkpoint storage or a job master; the test steps them and feeds their inboxes."""
    opened: list[Task] = []

    def build(job: JobGraph) -> dict[TaskId, Task]:
        messages: list[Any] = []  # what tasks send the job master: nobody reads it here
        tasks = build_tasks(
            job, job.task_ids(), local_channels(job), VirtualClock(), None, None, messages.append, _Deferred()
        )
        for task in tasks.values():
            task.open()
            opened.append(task)
        return tasks

    yield build
    for task in opened:
        task.close()


@dataclass(frozen=True)
class S3Server:
    """A real S3-compatible server (moto's server mode) on 127.0.0.1, for object-store tests."""

    endpoint: str  # host:port

    def uri(self, bucket: str, path: str = "") -> str:
        """An `s3://` URI that pyarrow resolves to this server, credentials included (workers
        on Spark see no environment of the test's)."""
        query = f"endpoint_override={self.endpoint}&scheme=http&region=us-east-1&allow_bucket_creation=true"
        return f"s3://test:test@{bucket}/{path}?{query}"

    def filesystem(self) -> Any:
        import pyarrow.fs as pafs

        return pafs.S3FileSystem(
            access_key="test", secret_key="test", endpoint_override=self.endpoint, scheme="http",
            region="us-east-1", allow_bucket_creation=True,
        )


@pytest.fixture(scope="session")
def s3() -> Iterator[S3Server]:
    """A moto server, started once for the session and stopped at its end."""
    import shutil
    import socket
    import subprocess

    server = shutil.which("moto_server", path=os.path.dirname(sys.executable)) or shutil.which("moto_server")
    if server is None:
        pytest.skip("moto[server] is not installed (it is in the test extra)")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    process = subprocess.Popen(
        [server, "-H", "127.0.0.1", "-p", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline or process.poll() is not None:
                    raise RuntimeError("moto_server did not start") from None
                time.sleep(0.05)  # the poll interval of a server starting
        yield S3Server(f"127.0.0.1:{port}")
    finally:
        process.terminate()
        process.wait(timeout=10)


from postgres_server import pg_dsn, postgres  # noqa: E402,F401 - fixtures: a real PostgreSQL server


@pytest.fixture
def nats_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A `nats-server -js` of this test's own on 127.0.0.1 (tests stop and restart it), torn
    down at its end; skips where the binary is missing (`.ci/run` installs Debian's)."""
    from log_servers import NATS_BINARY, NatsServer

    if NATS_BINARY is None:
        pytest.skip("nats-server is not installed (apt-get install nats-server; .ci/run does)")
    pytest.importorskip("nats", reason="nats-py is not installed (the nats and test extras have it)")
    server = NatsServer(NATS_BINARY, str(tmp_path_factory.mktemp("nats")))
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A `redis-server` of this test's own on 127.0.0.1 (append-only file, fsynced: a restart
    keeps what it acknowledged), torn down at its end; skips where the binary is missing."""
    from log_servers import REDIS_BINARY, RedisServer

    if REDIS_BINARY is None:
        pytest.skip("redis-server is not installed (apt-get install redis-server; .ci/run does)")
    pytest.importorskip("redis", reason="redis-py is not installed (the redis and test extras have it)")
    server = RedisServer(REDIS_BINARY, str(tmp_path_factory.mktemp("redis")))
    server.start()
    try:
        yield server
    finally:
        server.stop()
