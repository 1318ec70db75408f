"""Loops on Spark (classic and Spark Connect): connected components with SIGKILLed workers and
failing UDFs.

The final labels (the smallest label committed per vertex) must equal the failure-free run's.
"""

from __future__ import annotations

import importlib
import os
import random
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from epochal.connectors import read_committed
from epochal.runtime.result import JobResult
from spark_jobs import components_env, run_and_kill

pytestmark = [pytest.mark.spark, pytest.mark.fault]

EXAMPLES = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "examples"))
if EXAMPLES not in sys.path:
    sys.path.insert(0, EXAMPLES)
cc: Any = importlib.import_module("connected_components")


@pytest.fixture(scope="module", autouse=True)
def _ship_example(any_spark: Any) -> Iterator[None]:
    from pyspark import cloudpickle

    cloudpickle.register_pickle_by_value(cc)  # type: ignore[no-untyped-call]
    yield


def _labels(out: str) -> dict[int, int]:
    labels: dict[int, int] = cc.final_labels(tuple(r) for r in read_committed(out))
    return labels


def _expected(tmp_path: Path) -> dict[int, int]:
    env = components_env(str(tmp_path / "expected"), str(tmp_path / "c"))
    env.executor = "inprocess"
    env.execute("expected")
    return _labels(str(tmp_path / "expected"))


def test_components_on_spark_match_in_process(any_spark: Any, tmp_path: Path) -> None:
    on_spark = components_env(str(tmp_path / "spark"), str(tmp_path / "c1"), spark=any_spark)
    on_spark.execute("components")
    assert _labels(str(tmp_path / "spark")) == _expected(tmp_path)


def _run_and_kill(any_spark: Any, out: str, ckpt: str, rng: random.Random) -> JobResult:
    env = components_env(out, ckpt, spark=any_spark, slow=0.002)
    return run_and_kill(any_spark, env, "components", ckpt, rng)[0]


def test_components_survive_sigkill_of_a_worker(any_spark: Any, tmp_path: Path) -> None:
    expected = _expected(tmp_path)
    for trial in range(3):
        out, ckpt = str(tmp_path / f"out{trial}"), str(tmp_path / f"ckpt{trial}")
        result = _run_and_kill(any_spark, out, ckpt, random.Random(trial))
        assert result.restarts == 1, f"trial {trial}: the kill came after the job ended"
        assert _labels(out) == expected, f"trial {trial}"


def test_components_survive_an_exception_inside_the_loop(any_spark: Any, tmp_path: Path) -> None:
    expected = _expected(tmp_path)
    for trial, fail_after in enumerate(random.Random(5).sample(range(50, 600), 2)):
        out = str(tmp_path / f"out{trial}")
        env = components_env(out, str(tmp_path / f"ckpt{trial}"), spark=any_spark, slow=0.001,
                             fail_marker=str(tmp_path / f"failed{trial}"), fail_after=fail_after)
        result = env.execute("components")
        assert result.restarts == 1 and "inside the loop" in result.failures[0]
        assert _labels(out) == expected, f"trial {trial}"
