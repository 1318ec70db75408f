"""The engine core's jobs, run on local Spark: same committed output as in-process."""

from __future__ import annotations

import pytest

from epochal import CheckpointConfig, JobFailedError, RestartStrategy, StreamEnvironment
from epochal.cluster.spark import SparkExecutor
from epochal.connectors import FileSink, TextFileSource, read_committed
from spark_jobs import expected_updates, wordcount_env, write_corpus

pytestmark = pytest.mark.spark


def test_wordcount_on_spark_commits_exact_counts(spark, tmp_path) -> None:
    write_corpus(str(tmp_path / "corpus"), files=3, lines=500)
    env = wordcount_env(str(tmp_path / "corpus"), str(tmp_path / "out"), str(tmp_path / "ckpt"), spark=spark, slow=False)
    result = env.execute("wordcount")
    assert sorted(map(tuple, read_committed(str(tmp_path / "out")))) == expected_updates(str(tmp_path / "corpus"))
    assert result.restarts == 0
    assert result.checkpoints[-1].is_final
    assert result.operator("count").records_in == len(expected_updates(str(tmp_path / "corpus")))


def test_columnar_wordcount_on_spark_crosses_workers_as_arrow(spark, tmp_path) -> None:
    import pyarrow as pa
    import pyarrow.compute as pc

    def split_words(batch: pa.RecordBatch) -> pa.RecordBatch:
        words = pc.list_flatten(pc.utf8_split_whitespace(batch.column("line")))
        return pa.RecordBatch.from_arrays([words], names=["word"])

    write_corpus(str(tmp_path / "corpus"), files=2, lines=400)
    env = StreamEnvironment(parallelism=2, spark=spark, checkpoint=CheckpointConfig(interval=0.2, directory=str(tmp_path / "ckpt")))
    (
        env.from_source(TextFileSource(str(tmp_path / "corpus")))
        .map_batches(split_words)
        .key_by("word")
        .count()
        .sink_to(FileSink(str(tmp_path / "out")))
    )
    env.execute("columnar")
    assert sorted(map(tuple, read_committed(str(tmp_path / "out")))) == expected_updates(str(tmp_path / "corpus"))


def test_a_udf_failure_restarts_in_place_from_a_checkpoint(spark, tmp_path) -> None:
    """An exception leaves the Spark tasks alive: the workers restore a new generation in place."""
    marker = tmp_path / "failed-once"

    def fail_once(line: str) -> list[str]:
        if "w7 " in line and not marker.exists():
            import time

            time.sleep(0.5)  # let a checkpoint or two complete first
            marker.touch()
            raise ValueError("transient")
        return line.split()

    write_corpus(str(tmp_path / "corpus"), files=2, lines=400)
    env = StreamEnvironment(parallelism=2, spark=spark, checkpoint=CheckpointConfig(interval=0.1, directory=str(tmp_path / "ckpt")))
    (
        env.from_source(TextFileSource(str(tmp_path / "corpus")))
        .flat_map(fail_once, name="split")
        .key_by(lambda w: w)
        .count()
        .sink_to(FileSink(str(tmp_path / "out")))
    )
    executor = SparkExecutor(spark)
    result = executor.execute(env.job_graph("udf-failure"))
    assert result.restarts == 1
    assert "transient" in result.failures[0]
    assert sorted(map(tuple, read_committed(str(tmp_path / "out")))) == expected_updates(str(tmp_path / "corpus"))
    assert len(executor.recovery_seconds) == 1


def test_a_record_that_always_fails_ends_the_job_naming_operator_and_record(spark, tmp_path) -> None:
    def poisoned(line: str) -> list[str]:
        if line.startswith("w1 "):
            raise ValueError("poison")
        return line.split()

    write_corpus(str(tmp_path / "corpus"), files=1, lines=300)
    env = StreamEnvironment(parallelism=2, spark=spark, restart=RestartStrategy(max_restarts=1),
                            checkpoint=CheckpointConfig(interval=0.2, directory=str(tmp_path / "ckpt")))
    env.from_source(TextFileSource(str(tmp_path / "corpus"))).flat_map(poisoned, name="split").sink_to(FileSink(str(tmp_path / "out")))
    with pytest.raises(JobFailedError) as info:
        env.execute("poison")
    assert info.value.attempts == 2
    assert "'split'" in str(info.value) and "'w1 " in str(info.value) and "poison" in str(info.value)


def test_too_few_slots_is_a_clear_error_before_submission(spark, tmp_path) -> None:
    from epochal import EpochalError

    env = wordcount_env(str(tmp_path), str(tmp_path / "out"), str(tmp_path / "ckpt"), spark=spark, parallelism=3)
    with pytest.raises(EpochalError, match="needs 3 task slots"):
        env.execute("too-wide")


def test_workers_run_under_the_jobs_gc_thresholds(spark, tmp_path) -> None:
    import gc

    from epochal.testing import ListSource

    threshold = (12_345, 11, 13)
    env = StreamEnvironment(parallelism=2, spark=spark, gc_threshold=threshold)
    env.from_source(ListSource(range(8), splits=2)).map(lambda _: gc.get_threshold()).sink_to(
        FileSink(str(tmp_path / "out"))
    )
    env.execute("gc")
    assert [tuple(t) for t in read_committed(str(tmp_path / "out"))] == [threshold] * 8
