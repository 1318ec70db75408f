"""A columnar count with `emit="on_checkpoint"` stays exactly once when a Spark worker is
SIGKILLed: its local phase ships Arrow partials with their keys' hashes, the key exchange routes
them and the global phase finds the keys by those hashes (issue 36); what an aborted epoch
emitted is never committed, and its keys emit again, with the same counts, when it replays."""

from __future__ import annotations

import random
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from pyspark import cloudpickle

from epochal import CheckpointConfig, RestartStrategy, StreamEnvironment
from epochal.connectors import FileSink, TextFileSource, read_committed
from spark_jobs import check_per_epoch_updates, run_and_kill, word_counts, write_corpus

pytestmark = pytest.mark.spark


def _slow_split(batch: Any) -> Any:
    """Lines to a column of words, 2 ms a line (about 6 s a run): the kill lands mid-stream."""
    import pyarrow as pa
    import pyarrow.compute as pc

    time.sleep(0.002 * batch.num_rows)
    words = pc.list_flatten(pc.utf8_split_whitespace(batch.column(0)))
    return pa.RecordBatch.from_arrays([words], names=["word"])


def _row(record: Any) -> tuple[Any, ...]:
    return tuple(record.values()) if isinstance(record, dict) else tuple(record)


def test_sigkill_mid_stream_commits_each_word_s_columnar_counts_once(spark: Any, tmp_path: Path) -> None:
    cloudpickle.register_pickle_by_value(sys.modules[__name__])  # type: ignore[no-untyped-call]
    corpus, out, ckpt = str(tmp_path / "corpus"), str(tmp_path / "out"), str(tmp_path / "ckpt")
    write_corpus(corpus)
    env = StreamEnvironment(parallelism=2, executor="spark", spark=spark, batch_size=64,
                            checkpoint=CheckpointConfig(interval=0.3, directory=ckpt),
                            restart=RestartStrategy(max_restarts=3))
    (env.from_source(TextFileSource(corpus))
        .map_batches(_slow_split)
        .key_by("word")
        .count(emit="on_checkpoint")
        .sink_to(FileSink(out)))
    result, _ = run_and_kill(spark, env, "columnar-count-kill", ckpt, random.Random(5))
    assert result.restarts == 1 and result.restored_from[-1] is not None
    updates = [_row(r) for r in read_committed(out)]
    totals = word_counts(corpus)
    check_per_epoch_updates(updates, totals)  # type: ignore[arg-type]
    assert len(updates) <= len(totals) * len(result.checkpoints) < sum(totals.values())
