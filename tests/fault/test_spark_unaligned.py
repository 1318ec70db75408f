"""Unaligned checkpoints on Spark: a worker SIGKILLed while a slow operator holds its inputs
full; the restore replays the data that was in flight, and the committed output is exact."""

from __future__ import annotations

import collections
import random
import time
from pathlib import Path
from typing import Any

import pytest

from epochal import CheckpointConfig, RestartStrategy, StreamEnvironment
from epochal.connectors import FileSink, read_committed
from epochal.runtime.channel_state import IN_FLIGHT
from epochal.state.storage import CheckpointStorage
from epochal.testing import ListSource
from spark_jobs import run_and_kill

pytestmark = [pytest.mark.spark, pytest.mark.fault]

RECORDS = 3_000
KEYS = 16


def _env(spark: Any, out: str, ckpt: str) -> StreamEnvironment:
    def slow_pair(kv: tuple[int, int]) -> tuple[int, int]:  # a closure: Spark's workers get it by value
        time.sleep(0.001)  # the slow end of the job: its inputs stay full (backpressure)
        return kv

    env = StreamEnvironment(
        parallelism=2, spark=spark, batch_size=16, channel_capacity=2,
        checkpoint=CheckpointConfig(interval=0.3, directory=ckpt, mode="unaligned", retain=1_000),
        restart=RestartStrategy(max_restarts=3),
    )
    counts = env.from_source(ListSource(range(RECORDS), splits=2, batch_size=16)).key_by(lambda x: x % KEYS).count()
    counts.map(slow_pair).sink_to(FileSink(out))
    return env


def test_a_sigkill_under_backpressure_with_unaligned_checkpoints_commits_every_update_once(
    spark: Any, tmp_path: Path
) -> None:
    per_key = collections.Counter(x % KEYS for x in range(RECORDS))
    expected = sorted((k, n) for k, c in per_key.items() for n in range(1, c + 1))
    in_flight = 0
    for trial in range(2):
        out, ckpt = str(tmp_path / f"out{trial}"), str(tmp_path / f"ckpt{trial}")
        env = _env(spark, out, ckpt)
        result, _ = run_and_kill(spark, env, "unaligned", ckpt, random.Random(trial), delay=(0.0, 1.5))
        assert sorted(map(tuple, read_committed(out))) == expected, f"trial {trial}"
        assert result.restarts == 1
        storage = CheckpointStorage(ckpt, create=False)
        in_flight += sum(
            any(op.uid.endswith(IN_FLIGHT) for op in storage.resolve(cid).operators)
            for cid in storage.complete_checkpoints()
        )
    assert in_flight, "no checkpoint held data in flight: the unaligned path went untested"
