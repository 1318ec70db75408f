"""PostgreSQL connectors under faults, against a real server: a table's changes (CDC) copied
into a table (appends) and counted into another (upserts), committed exactly once through a
SIGKILLed Spark worker, a killed driver then resumed, and the server stopped and restarted mid-run.
The committed rows are read back with psycopg; every change once, nothing lost, nothing twice."""

from __future__ import annotations

import os
import random
import shutil
import signal
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from pyspark import cloudpickle

import postgres_jobs
from epochal.connectors.postgres.server import LocalPostgres, postgres_bin
from postgres_jobs import cdc_env, committed, expected_changes, expected_totals, fill_source_table
from spark_jobs import TESTS, complete_checkpoints, epochal_cli, run_and_kill, wait_until

pytestmark = pytest.mark.fault


def _prepared(dsn: str) -> int:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return int(conn.execute("SELECT count(*) FROM pg_prepared_xacts").fetchone()[0])  # type: ignore[index]


def _check_exact(dsn: str, changes: list[Any]) -> None:
    rows, totals = committed(dsn)
    assert len(rows) == len(changes)
    assert rows == changes
    assert totals == expected_totals(changes)
    assert _prepared(dsn) == 0


@pytest.mark.spark
def test_a_sigkilled_worker_loses_and_duplicates_no_change(spark: Any, pg_dsn: str, tmp_path: Path) -> None:
    cloudpickle.register_pickle_by_value(postgres_jobs)  # type: ignore[no-untyped-call]
    fill_source_table(pg_dsn)
    changes = expected_changes(pg_dsn)
    ckpt = str(tmp_path / "ckpt")
    env = cdc_env(pg_dsn, ckpt, spark=spark)
    result, _ = run_and_kill(spark, env, "cdc-kill", ckpt, random.Random(3), after_checkpoint=True, delay=(0.2, 1.5))
    assert result.restarts == 1 and result.restored_from[-1] is not None
    _check_exact(pg_dsn, changes)


@pytest.mark.spark
def test_a_killed_driver_resumed_from_latest_commits_every_change_once(pg_dsn: str, tmp_path: Path) -> None:
    fill_source_table(pg_dsn)
    changes = expected_changes(pg_dsn)
    ckpt = str(tmp_path / "ckpt")
    env = {**os.environ, "EPOCHAL_TEST_DSN": pg_dsn, "EPOCHAL_TEST_CKPT": ckpt}
    job = os.path.join(TESTS, "jobs", "postgres_job.py")
    first = epochal_cli(["run", job, "--checkpoint-dir", ckpt], env)
    wait_until(lambda: committed(pg_dsn)[0] != [] or first.poll() is not None, "rows were committed", 180)
    assert first.poll() is None, "the job ended before its first commit"
    time.sleep(random.Random(2).uniform(0.2, 1.0))
    os.killpg(first.pid, signal.SIGKILL)  # the driver, its JVM and every worker
    assert first.wait() == -signal.SIGKILL
    assert 0 < len(committed(pg_dsn)[0]) < len(changes)
    second = epochal_cli(["run", job, "--checkpoint-dir", ckpt, "--from-checkpoint", "latest"], env)
    _, err = second.communicate(timeout=300)
    assert second.returncode == 0, err.decode()[-3000:]
    _check_exact(pg_dsn, changes)


@pytest.mark.spark
def test_a_worker_killed_between_commit_prepared_and_the_notice_commits_once(pg_dsn: str, tmp_path: Path) -> None:
    """The fault point after `COMMIT PREPARED` (before an upsert's merge and the end of the
    notice): the restored subtask commits the same transactions again, finds them committed by
    their recorded epochs, and merges what was staged, once."""
    fill_source_table(pg_dsn, transactions=120)
    changes = expected_changes(pg_dsn)
    ckpt, markers = str(tmp_path / "ckpt"), str(tmp_path / "markers")
    env = {**os.environ, "EPOCHAL_TEST_DSN": pg_dsn, "EPOCHAL_TEST_CKPT": ckpt,
           "EPOCHAL_FAULT_POINTS": f"postgres_sink.committed:{markers}"}
    run = epochal_cli(["run", os.path.join(TESTS, "jobs", "postgres_job.py"), "--checkpoint-dir", ckpt], env)
    _, err = run.communicate(timeout=300)
    assert run.returncode == 0, err.decode()[-3000:]
    assert os.path.exists(os.path.join(markers, "postgres_sink.committed")), "the fault point was never reached"
    _check_exact(pg_dsn, changes)


@pytest.fixture
def own_server() -> Iterator[LocalPostgres]:
    """A server of the test's own, to stop and start (the session's serves other tests)."""
    if postgres_bin() is None:
        pytest.skip("no PostgreSQL server installed (apt-get install postgresql)")
    directory = tempfile.mkdtemp(prefix="epochal-pg-")
    server = LocalPostgres(directory).start()
    yield server
    server.stop("immediate")
    shutil.rmtree(directory, ignore_errors=True)


@pytest.mark.parametrize("how", ["fast", "immediate"])
def test_the_server_stopped_and_restarted_mid_run_loses_nothing(own_server: LocalPostgres, tmp_path: Path,
                                                                how: str) -> None:
    dsn = own_server.dsn
    fill_source_table(dsn, transactions=150)
    changes = expected_changes(dsn)
    ckpt = str(tmp_path / "ckpt")
    env = cdc_env(dsn, ckpt, executor="inprocess", restarts=5)
    handle = env.execute_async("cdc-restart")
    wait_until(lambda: bool(complete_checkpoints(ckpt)) and committed(dsn)[0] != [], "rows were committed", 120)
    own_server.stop(how)  # a crash of the server with "immediate": prepared transactions survive it
    time.sleep(2.0)
    own_server.start()
    result = handle.result(timeout=300)
    assert result.restarts >= 1
    assert all("lost the server" in f or "cannot reach the PostgreSQL server" in f for f in result.failures), (
        result.failures)  # a clear line, naming what happened
    _check_exact(dsn, changes)
