"""The engine core's jobs, run on local Spark, classic and through Spark Connect (`any_spark`): same
committed output as in-process."""

from __future__ import annotations

import gc
import os
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from epochal import CheckpointConfig, EpochalError, JobFailedError, RestartStrategy, StreamEnvironment
from epochal.cluster.spark import SparkExecutor
from epochal.connectors import FileSink, TextFileSource, read_committed
from epochal.testing import ListSource
from spark_jobs import (
    BatchTypeSink,
    batch_types,
    complete_checkpoints,
    expected_updates,
    wordcount_env,
    write_corpus,
)

pytestmark = pytest.mark.spark


def _launches(executor: SparkExecutor) -> int:
    """Barrier stages the executor submitted to Spark."""
    return [event for event, _ in executor.timeline].count("submitted")


def test_wordcount_on_spark_commits_exact_counts(any_spark: Any, tmp_path: Path) -> None:
    write_corpus(str(tmp_path / "corpus"), files=3, lines=500)
    env = wordcount_env(
        str(tmp_path / "corpus"), str(tmp_path / "out"), str(tmp_path / "ckpt"), spark=any_spark, slow=False
    )
    result = env.execute("wordcount")
    assert sorted(map(tuple, read_committed(str(tmp_path / "out")))) == expected_updates(str(tmp_path / "corpus"))
    assert result.restarts == 0
    assert result.checkpoints[-1].is_final
    assert result.operator("count").records_in == len(expected_updates(str(tmp_path / "corpus")))


def test_columnar_wordcount_on_spark_crosses_workers_as_arrow(any_spark: Any, tmp_path: Path) -> None:
    def split_words(batch: pa.RecordBatch) -> pa.RecordBatch:
        words = pc.list_flatten(pc.utf8_split_whitespace(batch.column("line")))
        return pa.RecordBatch.from_arrays([words], names=["word"])

    write_corpus(str(tmp_path / "corpus"), files=2, lines=400)
    env = StreamEnvironment(
        parallelism=2, spark=any_spark, checkpoint=CheckpointConfig(interval=0.2, directory=str(tmp_path / "ckpt"))
    )
    counts = (
        env.from_source(TextFileSource(str(tmp_path / "corpus")))
        .map_batches(split_words)
        .key_by("word")  # each worker's words go to both workers' counts
        .count()
    )
    counts.sink_to(FileSink(str(tmp_path / "out")))
    counts.sink_to(BatchTypeSink(str(tmp_path / "types")), name="types")
    env.execute("columnar")
    assert sorted(map(tuple, read_committed(str(tmp_path / "out")))) == expected_updates(str(tmp_path / "corpus"))
    # The count emits an Arrow batch only for an Arrow batch in (a list gets the per-record path),
    # so Arrow batches at both subtasks' sinks, and nothing else, mean the batches that reached the
    # counts, across workers too, were Arrow.
    seen = batch_types(str(tmp_path / "types"))
    assert sorted(seen) == ["subtask-0.txt", "subtask-1.txt"]
    for batches in seen.values():
        assert batches and {kind for kind, _ in batches} == {"RecordBatch"}
    rows = sum(n for batches in seen.values() for _, n in batches)
    assert rows == len(expected_updates(str(tmp_path / "corpus")))


def _fail_once_after_a_checkpoint(ckpt: str, marker: str) -> Any:
    def split(line: str) -> list[str]:
        import time

        time.sleep(0.004)  # paces the source: the job lasts long enough for checkpoints to complete
        if complete_checkpoints(ckpt):
            try:
                os.close(os.open(marker, os.O_CREAT | os.O_EXCL))  # one worker, once
            except FileExistsError:
                pass
            else:
                raise ValueError("transient")
        return line.split()

    return split


def test_a_udf_failure_restarts_in_place_from_a_checkpoint(any_spark: Any, tmp_path: Path) -> None:
    """An exception leaves the Spark tasks alive: the workers restore the next attempt in place."""
    ckpt = str(tmp_path / "ckpt")
    # 2,000 paced lines: about 4 s, so a checkpoint completes before the end even on a loaded machine
    write_corpus(str(tmp_path / "corpus"), files=2, lines=1000)
    env = StreamEnvironment(  # small batches: a barrier does not wait long behind the paced UDF
        parallelism=2, spark=any_spark, batch_size=32, checkpoint=CheckpointConfig(interval=0.1, directory=ckpt)
    )
    (
        env.from_source(TextFileSource(str(tmp_path / "corpus")))
        .flat_map(_fail_once_after_a_checkpoint(ckpt, str(tmp_path / "failed-once")), name="split")
        .key_by(lambda w: w)
        .count()
        .sink_to(FileSink(str(tmp_path / "out")))
    )
    executor = SparkExecutor(any_spark)
    result = executor.execute(env.job_graph("udf-failure"))
    assert result.restarts == 1
    assert "transient" in result.failures[0]
    first, restored = result.restored_from
    assert first is None and restored is not None, "the second attempt did not restore a checkpoint"
    assert _launches(executor) == 1, "the restart was not in place: a new Spark stage was submitted"
    assert sorted(map(tuple, read_committed(str(tmp_path / "out")))) == expected_updates(str(tmp_path / "corpus"))
    assert len(executor.recovery_seconds) == 1


def test_a_record_that_always_fails_ends_the_job_naming_operator_and_record(any_spark: Any, tmp_path: Path) -> None:
    def poisoned(line: str) -> list[str]:
        if line.startswith("w1 "):
            raise ValueError("poison")
        return line.split()

    write_corpus(str(tmp_path / "corpus"), files=1, lines=300)
    env = StreamEnvironment(parallelism=2, spark=any_spark, restart=RestartStrategy(max_restarts=1),
                            checkpoint=CheckpointConfig(interval=0.2, directory=str(tmp_path / "ckpt")))
    env.from_source(TextFileSource(str(tmp_path / "corpus"))).flat_map(poisoned, name="split").sink_to(
        FileSink(str(tmp_path / "out"))
    )
    with pytest.raises(JobFailedError) as info:
        env.execute("poison")
    assert info.value.attempts == 2
    assert "'split'" in str(info.value) and "'w1 " in str(info.value) and "poison" in str(info.value)


def test_too_few_slots_is_a_clear_error_before_submission(any_spark: Any, tmp_path: Path) -> None:
    env = wordcount_env(str(tmp_path), str(tmp_path / "out"), str(tmp_path / "ckpt"), spark=any_spark, parallelism=3)
    executor = SparkExecutor(any_spark)
    with pytest.raises(EpochalError, match="needs 3 task slots"):
        executor.execute(env.job_graph("too-wide"))
    assert _launches(executor) == 0


def test_workers_run_under_the_jobs_gc_thresholds(any_spark: Any, tmp_path: Path) -> None:
    threshold = (12_345, 11, 13)
    env = StreamEnvironment(parallelism=2, spark=any_spark, gc_threshold=threshold)
    env.from_source(ListSource(range(8), splits=2)).map(lambda _: gc.get_threshold()).sink_to(
        FileSink(str(tmp_path / "out"))
    )
    env.execute("gc")
    assert [tuple(t) for t in read_committed(str(tmp_path / "out"))] == [threshold] * 8
