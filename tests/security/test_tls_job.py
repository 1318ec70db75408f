"""A job on local Spark with TLS on every link (`StreamEnvironment(tls=...)`): its output is
exact, a worker killed mid-stream reconnects over TLS, and a stranger's plain or TLS connection
to a port is refused."""

from __future__ import annotations

import os
import signal
import threading
from pathlib import Path
from typing import Any

import hostile
import pytest

from epochal import StreamEnvironment
from epochal.cluster.spark import SparkExecutor
from epochal.config import NetworkConfig, TlsConfig
from epochal.runtime.master.control import JobControl
from epochal.testing import make_test_certificates


@pytest.fixture(scope="module")
def certificates(tmp_path_factory: pytest.TempPathFactory) -> TlsConfig:
    try:
        return make_test_certificates(tmp_path_factory.mktemp("tls"))
    except RuntimeError as exc:
        pytest.skip(str(exc))


@pytest.mark.spark
@pytest.mark.fault
def test_a_job_over_tls_is_exact_through_a_worker_kill_and_refuses_strangers(
    spark: Any, tmp_path: Path, certificates: TlsConfig
) -> None:
    from spark_jobs import committed, expected, wait_until, wordcount_env, write_corpus

    corpus, out, ckpt = tmp_path / "in", tmp_path / "out", tmp_path / "ckpt"
    write_corpus(str(corpus), files=2, lines=1200)
    env = wordcount_env(str(corpus), str(out), str(ckpt), spark=spark)
    assert isinstance(env, StreamEnvironment)
    env.network = NetworkConfig(tls=certificates)
    graph = env.job_graph("tls")
    assert graph.config.network.tls == certificates
    executor, control = SparkExecutor(spark), JobControl(graph.name, 2)
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["result"] = executor.execute(graph, None, control)
        except BaseException as exc:  # noqa: BLE001 - checked below
            outcome["error"] = exc

    thread = threading.Thread(target=run)
    thread.start()
    wait_until(lambda: len(control.status().listening) == 3 or not thread.is_alive(), "the ports are listed")
    for _, where in control.status().listening:
        host, _, port = where.rpartition(":")
        hostile.send((host, int(port)), b"GET / HTTP/1.0\r\n\r\n")  # plain TCP to a TLS port
    wait_until(lambda: control.refusals.count >= 3, "three refusals")
    wait_until(lambda: any(c.startswith("chk-") for c in os.listdir(ckpt)), "a checkpoint")
    os.kill(executor.worker_pids[1], signal.SIGKILL)  # its replacement links again, over TLS
    thread.join(timeout=300)
    assert "error" not in outcome, outcome
    assert outcome["result"].restarts >= 1
    assert committed(out) == expected(corpus)
