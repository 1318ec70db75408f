"""The SparkSession's master is probed before Spark starts, and the log level is the user's to
raise (`EPOCHAL_SPARK_LOG`); nothing here starts a JVM."""

from __future__ import annotations

import socket
import time

import pytest

from epochal import EpochalError
from epochal.cluster import session
from epochal.cluster.session import master_addresses, probe_master, spark_log_level


def closed_port() -> int:
    """A port on 127.0.0.1 that nothing listens on (just released by the kernel)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.parametrize(
    ("master", "addresses"),
    [
        ("spark://127.0.0.1:7077", [("127.0.0.1", 7077)]),
        ("spark://a:7077,b:7078", [("a", 7077), ("b", 7078)]),
        ("k8s://https://api.example:6443", [("api.example", 6443)]),
        ("k8s://api.example", [("api.example", 443)]),
        ("local[2]", []),
        ("local-cluster[2,1,1024]", []),
        ("yarn", []),
    ],
)
def test_the_addresses_a_master_url_names(master: str, addresses: list[tuple[str, int]]) -> None:
    assert master_addresses(master) == addresses


@pytest.mark.parametrize("master", ["spark://nohost", "spark://host:port", "spark://"])
def test_a_malformed_standalone_url_is_named(master: str) -> None:
    with pytest.raises(EpochalError, match="bad Spark master URL"):
        master_addresses(master)


def test_an_unreachable_master_fails_at_once_naming_it() -> None:
    master = f"spark://127.0.0.1:{closed_port()}"
    started = time.monotonic()
    with pytest.raises(EpochalError) as refused:
        probe_master(master)
    assert time.monotonic() - started < 5
    assert str(refused.value).startswith(f"cannot reach the Spark master {master} (")
    assert "refused" in str(refused.value)


def test_a_reachable_master_passes_the_probe() -> None:
    with socket.create_server(("127.0.0.1", 0)) as server:
        probe_master(f"spark://127.0.0.1:{server.getsockname()[1]}")
        probe_master(f"spark://127.0.0.1:{closed_port()},127.0.0.1:{server.getsockname()[1]}")  # one of several


def test_local_masters_are_not_probed() -> None:
    probe_master("local[*]")


def test_create_session_probes_before_spark_starts() -> None:
    with pytest.raises(EpochalError, match="cannot reach the Spark master"):
        session.create_session(f"spark://127.0.0.1:{closed_port()}")


def test_the_spark_log_level_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(session.SPARK_LOG_ENV, raising=False)
    assert spark_log_level() is None  # quiet
    monkeypatch.setenv(session.SPARK_LOG_ENV, "info")
    assert spark_log_level() == "INFO"
    monkeypatch.setenv(session.SPARK_LOG_ENV, "loud")
    with pytest.raises(EpochalError, match="EPOCHAL_SPARK_LOG must be one of"):
        spark_log_level()


def test_use_master_is_scoped() -> None:
    assert session._default_master is None
    with session.use_master("spark://h:1"):
        assert session._default_master == "spark://h:1"
    assert session._default_master is None
