"""Input, checkpoints and output on a real S3-compatible server (moto, on 127.0.0.1), a job on
Spark, and a worker SIGKILLed mid-stream: every watched object's words are counted exactly once,
the restore reading its checkpoint back from the server."""

from __future__ import annotations

import collections
import os
import random
import signal
import uuid
from typing import Any

import pyarrow.dataset as ds
import pytest

from epochal import CheckpointConfig, JobCancelledError, RestartStrategy, StreamEnvironment
from epochal.cluster.spark import SparkExecutor
from epochal.connectors import ParquetSink, TextFileSource
from epochal.runtime.master.control import JobControl
from spark_jobs import check_per_epoch_updates, run_in_background, slow_split, wait_until

pytestmark = pytest.mark.spark


def _corpus(seed: int, lines: int = 400) -> str:
    rng = random.Random(seed)
    return "".join(f"w{rng.randrange(50)} w{rng.randrange(50)}\n" for _ in range(lines))


def test_sigkill_with_everything_on_s3_counts_each_object_once(spark: Any, s3: Any) -> None:
    fs, bucket = s3.filesystem(), f"spark-{uuid.uuid4().hex[:8]}"
    fs.create_dir(bucket)

    def put(i: int) -> None:
        with fs.open_output_stream(f"{bucket}/inbox/f{i}.txt") as out:
            out.write(_corpus(i).encode())

    put(0)
    env = StreamEnvironment(
        parallelism=2,
        executor="spark",
        spark=spark,
        checkpoint=CheckpointConfig(interval=0.3, directory=s3.uri(bucket, "ckpt")),
        restart=RestartStrategy(max_restarts=3),
        batch_size=32,
    )
    lines = env.from_source(TextFileSource(s3.uri(bucket, "inbox"), watch=0.1, split_size=2_000))
    counts = lines.flat_map(slow_split).key_by(lambda w: w).count(emit="on_checkpoint")
    counts.sink_to(ParquetSink(s3.uri(bucket, "out"), spark_metadata=False))
    job = env.job_graph("s3-kill")
    executor, control = SparkExecutor(spark), JobControl(job.name, 2)

    def committed() -> list[tuple[str, int]]:
        try:
            table = ds.dataset(f"{bucket}/out", filesystem=fs, format="parquet").to_table()
        except (FileNotFoundError, OSError):
            return []
        if table.num_columns < 2:
            return []
        return list(zip(table.column(0).to_pylist(), table.column(1).to_pylist(), strict=True))

    totals = collections.Counter(w for i in range(4) for w in _corpus(i).split())
    thread, outcome = run_in_background(executor, job, control)
    try:
        wait_until(lambda: len(executor.worker_pids) == 2, "both workers said hello")
        put(1)
        wait_until(lambda: (control.status().last_checkpoint or 0) >= 2, "two checkpoints completed")
        put(2)
        os.kill(sorted(executor.worker_pids.values())[0], signal.SIGKILL)
        wait_until(lambda: control.status().restarts == 1, "the job restarted")
        put(3)
        wait_until(
            lambda: {w: n for w, n in sorted(committed(), key=lambda r: r[1])} == dict(totals)
            or not thread.is_alive(),
            "every object's words are committed",
            240,
        )
    finally:
        control.request_cancel()
        thread.join(timeout=120)
    assert not thread.is_alive()
    assert isinstance(outcome.get("error"), JobCancelledError), outcome
    assert control.status().restarts == 1
    check_per_epoch_updates(committed(), dict(totals))
