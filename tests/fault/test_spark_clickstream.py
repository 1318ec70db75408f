"""The message-log example on Spark, a worker killed mid-run: clickstream sessions from a
JetStream subject into PostgreSQL (`examples/clickstream_sessions.py`), every session committed
once, read back with psycopg, equal to the sessions of the clicks by their definition."""

from __future__ import annotations

import asyncio
import datetime as dt
import importlib
import json
import os
import signal
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from epochal.cluster.spark import SparkExecutor
from epochal.runtime.master.control import JobControl
from spark_jobs import run_in_background, wait_until

pytestmark = [pytest.mark.spark, pytest.mark.fault]

USERS = 3_000  # about 48,000 clicks: seconds of work after the first checkpoint, where the kill lands

EXAMPLES = str(Path(__file__).resolve().parents[2] / "examples")


def _sessions(clicks: list[tuple[str, float]], gap: float) -> list[tuple[str, float, float, int]]:
    """Per user, clicks in time order cut where two are `gap` or more apart; a session spans
    its first click to its last plus the gap."""
    by_user: dict[str, list[float]] = defaultdict(list)
    for user, t in clicks:
        by_user[user].append(t)
    out = []
    for user in sorted(by_user):
        times = sorted(by_user[user])
        first = 0
        for i in range(1, len(times) + 1):
            if i == len(times) or times[i] - times[i - 1] >= gap:
                out.append((user, times[first], times[i - 1] + gap, i - first))
                first = i
    return out


def test_clickstream_sessions_on_spark_with_a_worker_killed_mid_run(
    spark: Any, tmp_path: Path, nats_server: Any, pg_dsn: str
) -> None:
    import psycopg
    from pyspark import cloudpickle

    sys.path.insert(0, EXAMPLES)
    try:
        example: Any = importlib.import_module("clickstream_sessions")
    finally:
        sys.path.remove(EXAMPLES)
    cloudpickle.register_pickle_by_value(example)  # type: ignore[no-untyped-call]  # workers cannot import examples/
    clicks = asyncio.run(example.publish_clicks(nats_server.url, USERS))
    day = [(c["user"], dt.datetime.fromisoformat(c["ts"]).replace(tzinfo=dt.UTC).timestamp())
           for c in (json.loads(payload) for _, payload in example.clicks_of_a_day(USERS))]
    want = _sessions(day, gap=30 * 60.0)
    example.new_table(pg_dsn)
    env = example.sessions_job(nats_server.url, pg_dsn, str(tmp_path / "ckpt"), spark=spark)
    job = env.job_graph("clickstream-kill")
    executor, control = SparkExecutor(spark), JobControl(job.name, 2)
    thread, outcome = run_in_background(executor, job, control)
    try:
        wait_until(lambda: len(executor.worker_pids) == 2, "both workers said hello")
        wait_until(lambda: (control.status().last_checkpoint or 0) >= 1 or not thread.is_alive(), "a checkpoint")
        assert thread.is_alive(), "the job ended before a worker could be killed mid-run"
        assert example.sessions_committed(pg_dsn) < len(want), "every session was committed before the kill"
        os.kill(sorted(executor.worker_pids.values())[1], signal.SIGKILL)
        thread.join(300)
    finally:
        if thread.is_alive():
            control.request_cancel()
            thread.join(60)
    assert "error" not in outcome, outcome
    assert control.status().restarts >= 1  # the kill was mid-run
    with psycopg.connect(pg_dsn) as conn:
        rows = conn.execute("SELECT user_id, session_start, session_end, clicks FROM click_sessions").fetchall()
    assert clicks == len(day) and sorted(rows) == want
