"""Loops on Spark: connected components with SIGKILLed workers and failing UDFs.

The final labels (the smallest label committed per vertex) must equal the failure-free run's.
"""

from __future__ import annotations

import glob
import os
import random
import signal
import sys
import threading
import time

import pytest

from epochal.cluster.spark import SparkExecutor
from epochal.connectors import read_committed
from spark_jobs import components_env

pytestmark = [pytest.mark.spark, pytest.mark.fault]

EXAMPLES = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "examples"))
if EXAMPLES not in sys.path:
    sys.path.insert(0, EXAMPLES)
import connected_components as cc  # noqa: E402


@pytest.fixture(scope="module", autouse=True)
def _ship_example(spark):
    from pyspark import cloudpickle

    cloudpickle.register_pickle_by_value(cc)


def _labels(out: str) -> dict:
    return cc.final_labels(tuple(r) for r in read_committed(out))


def test_components_on_spark_match_in_process(spark, tmp_path) -> None:
    on_spark = components_env(str(tmp_path / "spark"), str(tmp_path / "c1"), spark=spark)
    on_spark.execute("components")
    local = components_env(str(tmp_path / "local"), str(tmp_path / "c2"))
    local.executor = "inprocess"
    local.execute("components")
    assert _labels(str(tmp_path / "spark")) == _labels(str(tmp_path / "local"))


def test_components_survive_sigkill_of_a_worker(spark, tmp_path) -> None:
    expected_env = components_env(str(tmp_path / "expected"), str(tmp_path / "c"))
    expected_env.executor = "inprocess"
    expected_env.execute("expected")
    expected = _labels(str(tmp_path / "expected"))
    for trial in range(3):
        rng = random.Random(trial)
        out, ckpt = str(tmp_path / f"out{trial}"), str(tmp_path / f"ckpt{trial}")
        env = components_env(out, ckpt, spark=spark, slow=0.002)
        executor = SparkExecutor(spark)
        errors: list[BaseException] = []
        results = []

        def run() -> None:
            try:
                results.append(executor.execute(env.job_graph("components")))
            except BaseException as exc:  # noqa: BLE001
                errors.append(exc)

        thread = threading.Thread(target=run)
        thread.start()
        deadline = time.monotonic() + 120
        while not glob.glob(os.path.join(ckpt, "chk-*", "MANIFEST.json")) and time.monotonic() < deadline:
            time.sleep(0.02)
        time.sleep(rng.uniform(0.0, 1.0))
        os.kill(rng.choice(sorted(executor.worker_pids.values())), signal.SIGKILL)
        thread.join(timeout=300)
        assert not errors, errors
        assert results[0].restarts == 1, f"trial {trial}: the kill came after the job ended"
        assert _labels(out) == expected, f"trial {trial}"


def test_components_survive_an_exception_inside_the_loop(spark, tmp_path) -> None:
    expected_env = components_env(str(tmp_path / "expected"), str(tmp_path / "c"))
    expected_env.executor = "inprocess"
    expected_env.execute("expected")
    for trial, fail_after in enumerate(random.Random(5).sample(range(50, 600), 2)):
        out = str(tmp_path / f"out{trial}")
        env = components_env(out, str(tmp_path / f"ckpt{trial}"), spark=spark, slow=0.001,
                             fail_marker=str(tmp_path / f"failed{trial}"), fail_after=fail_after)
        result = env.execute("components")
        assert result.restarts == 1 and "inside the loop" in result.failures[0]
        assert _labels(out) == _labels(str(tmp_path / "expected")), f"trial {trial}"
