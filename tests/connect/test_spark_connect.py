"""What only Spark Connect sessions have: `sc://` URLs, a session made with `remote("local[2]")`,
and a job master in the client that the executors may not reach.

The jobs themselves run through Connect in the integration, fault and state tests (`any_spark`).
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from epochal import EpochalError
from epochal.cluster import session as session_module
from epochal.cluster import stage_host
from epochal.cluster.session import create_session, is_connect, master_addresses, probe_master
from epochal.cluster.spark import BIND_HOST_ENV, JobMasterUnreachable, SparkExecutor
from epochal.connectors import read_committed
from spark_jobs import TESTS, expected_updates, wordcount_env, write_corpus


def closed_port() -> int:
    """A port on 127.0.0.1 that nothing listens on (just released by the kernel)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.parametrize(
    ("url", "addresses"),
    [
        ("sc://127.0.0.1:15003", [("127.0.0.1", 15003)]),
        ("sc://connect.example", [("connect.example", 15002)]),  # Spark Connect's default port
        ("sc://connect.example:443/;use_ssl=true;token=abc", [("connect.example", 443)]),
    ],
)
def test_the_address_a_connect_url_names(url: str, addresses: list[tuple[str, int]]) -> None:
    assert master_addresses(url) == addresses


@pytest.mark.parametrize("url", ["sc://", "sc://host:port", "sc://:15002"])
def test_a_malformed_connect_url_is_named(url: str) -> None:
    with pytest.raises(EpochalError, match="bad Spark Connect URL"):
        master_addresses(url)


def test_an_unreachable_connect_server_fails_at_once_naming_it() -> None:
    url = f"sc://127.0.0.1:{closed_port()}"
    started = time.monotonic()
    with pytest.raises(EpochalError, match=f"cannot reach the Spark master {url} .*refused"):
        create_session(url)  # probed before any client is built
    assert time.monotonic() - started < 5


def test_classic_sessions_are_not_connect_sessions() -> None:
    assert not is_connect(object())


@pytest.mark.spark
def test_the_connect_server_is_probed_and_its_session_told_apart(
    connect_url: str, spark_connect: Any, spark: Any
) -> None:
    probe_master(connect_url)
    assert is_connect(spark_connect) and not is_connect(spark)


@pytest.mark.spark
@pytest.mark.connect
def test_workers_bind_to_the_route_towards_the_connect_server(
    spark_connect: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(BIND_HOST_ENV, raising=False)
    assert session_module.bind_host(spark_connect) == "127.0.0.1"  # the server is on this machine
    monkeypatch.setenv(BIND_HOST_ENV, "10.1.2.3")
    assert session_module.bind_host(spark_connect) == "10.1.2.3"


@pytest.mark.spark
def test_workers_that_cannot_reach_the_job_master_fail_the_job_at_once_in_one_line(
    any_spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As when the executors cannot reach a Connect client: the workers are told an address
    where nothing listens. The job fails in one line, without relaunching the stage."""
    port = closed_port()
    build = stage_host.StageHost.__init__

    def advertise_a_closed_port(self: Any, *args: Any) -> None:
        build(self, *args)
        self.address = ("127.0.0.1", port)  # what the workers are told to connect to

    monkeypatch.setattr(stage_host.StageHost, "__init__", advertise_a_closed_port)
    write_corpus(str(tmp_path / "corpus"), files=1, lines=10)
    env = wordcount_env(str(tmp_path / "corpus"), str(tmp_path / "out"), str(tmp_path / "ckpt"), spark=any_spark)
    executor = SparkExecutor(any_spark)
    started = time.monotonic()
    with pytest.raises(JobMasterUnreachable) as failed:
        executor.execute(env.job_graph("unreachable"))
    assert time.monotonic() - started < 30  # Spark's stage start, then a refused connection
    message = str(failed.value)
    assert "\n" not in message
    assert message.startswith(f"the Spark workers cannot reach the job master at 127.0.0.1:{port} from worker ")
    assert "connection refused" in message and BIND_HOST_ENV in message
    assert [event for event, _ in executor.timeline].count("submitted") == 1  # no relaunch


_REMOTE_LOCAL_JOB = r"""
import sys
sys.path.insert(0, {tests!r})
from pyspark import cloudpickle
import spark_jobs
from epochal.cluster.session import create_session, is_connect
session = create_session("local[2]", connect=True)  # SparkSession.builder.remote("local[2]")
cloudpickle.register_pickle_by_value(spark_jobs)
env = spark_jobs.wordcount_env({corpus!r}, {out!r}, {ckpt!r}, slow=False)  # no session given: the active one
result = env.execute("remote-local")
print("connect" if is_connect(session) else "classic", result.restarts)
"""


@pytest.mark.spark
@pytest.mark.connect
def test_a_job_runs_on_a_remote_local_session_in_a_process_of_its_own(tmp_path: Path) -> None:
    """The whole public path: `remote("local[2]")` (a Connect server in the process, as the
    tests' shared driver is not), the active session found by the job, the output exact."""
    corpus, out, ckpt = str(tmp_path / "corpus"), str(tmp_path / "out"), str(tmp_path / "ckpt")
    write_corpus(corpus, files=2, lines=300)
    script = _REMOTE_LOCAL_JOB.format(tests=TESTS, corpus=corpus, out=out, ckpt=ckpt)
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.split() == ["connect", "0"]
    assert sorted(map(tuple, read_committed(out))) == expected_updates(corpus)
    assert "WARN" not in run.stderr and "log4j" not in run.stderr, run.stderr[-2000:]  # a quiet start
