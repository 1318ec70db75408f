"""Busy and nested loops on Spark (issue 37): a loop checkpoints while it runs, and a SIGKILLed
worker changes nothing committed, with loops nested or not.

The jobs (`loop_jobs`) emit every value they compute, so the committed output must be exactly the
known multiset: nothing lost, nothing twice.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import loop_jobs
from epochal.connectors import read_committed
from spark_jobs import run_and_kill

pytestmark = [pytest.mark.spark, pytest.mark.fault]


@pytest.fixture(scope="module", autouse=True)
def _ship_jobs(spark: Any) -> Iterator[None]:
    from pyspark import cloudpickle

    cloudpickle.register_pickle_by_value(loop_jobs)  # type: ignore[no-untyped-call]
    yield


def test_a_busy_loop_checkpoints_while_it_runs_and_survives_sigkill(spark: Any, tmp_path: Path) -> None:
    values = [random.Random(1).randrange(1 << 10, 1 << 14) for _ in range(3000)]
    for trial in range(2):
        out, ckpt = str(tmp_path / f"out{trial}"), str(tmp_path / f"c{trial}")
        env = loop_jobs.halving_env(out, ckpt, values, spark=spark, slow=0.00005, interval=0.3)
        result, _ = run_and_kill(spark, env, "busy", ckpt, random.Random(trial))
        assert result.restarts == 1, f"trial {trial}: the kill came after the job ended"
        assert sorted(read_committed(out)) == loop_jobs.halvings(values), f"trial {trial}"
        periodic = [c for c in result.checkpoints if not c.is_final]
        assert len(periodic) >= 3, f"trial {trial}: {len(periodic)} checkpoints completed while the loop ran"


def test_nested_loops_survive_sigkill(spark: Any, tmp_path: Path) -> None:
    rng = random.Random(3)
    inputs = [(v, rng.randrange(0, 4), v) for v in (rng.randrange(2, 1 << 12) for _ in range(600))]
    for trial in range(2):
        out, ckpt = str(tmp_path / f"out{trial}"), str(tmp_path / f"c{trial}")
        env = loop_jobs.nested_env(out, ckpt, inputs, spark=spark, slow=0.0001, interval=0.3)
        result, _ = run_and_kill(spark, env, "nested", ckpt, random.Random(10 + trial))
        assert result.restarts == 1, f"trial {trial}: the kill came after the job ended"
        assert sorted(tuple(r) for r in read_committed(out)) == loop_jobs.nested_expected(inputs), f"trial {trial}"


def test_nested_pagerank_survives_sigkill(spark: Any, tmp_path: Path) -> None:
    """The example's nested fixed point: every rank increment committed once (their total
    would show one twice) and the ranks within the example's tolerance of power iteration."""
    import importlib
    import os
    import sys

    from pyspark import cloudpickle

    from epochal import CheckpointConfig, StreamEnvironment

    examples = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "examples")
    sys.path.insert(0, examples)
    try:
        pr: Any = importlib.import_module("nested_pagerank")
    finally:
        sys.path.remove(examples)
    cloudpickle.register_pickle_by_value(pr)  # type: ignore[no-untyped-call]
    graph = pr.random_graph()
    out, ckpt = str(tmp_path / "out"), str(tmp_path / "ckpt")
    env = StreamEnvironment(parallelism=2, spark=spark, batch_size=32,
                            checkpoint=CheckpointConfig(interval=0.1, directory=ckpt))
    pr.pagerank(env, graph, out)
    # the job takes a few seconds on an idle machine: the kill comes soon after its first checkpoint
    result, _ = run_and_kill(spark, env, "pagerank", ckpt, random.Random(5), delay=(0.0, 0.2))
    assert result.restarts == 1, "the kill came after the job ended"
    pr.check(pr.ranks(tuple(r) for r in read_committed(out)), graph)
