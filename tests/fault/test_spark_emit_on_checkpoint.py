"""A count that emits once per epoch (`emit="on_checkpoint"`) stays exactly once when a Spark
worker is SIGKILLed: what an aborted epoch emitted is never committed, and its keys emit again,
with the same counts, in the epoch that replays it."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

from epochal.connectors import read_committed
from spark_jobs import check_per_epoch_updates, run_and_kill, word_counts, wordcount_env, write_corpus

pytestmark = pytest.mark.spark


def test_sigkill_mid_stream_commits_each_key_s_per_epoch_counts_once(spark: Any, tmp_path: Path) -> None:
    corpus, out, ckpt = str(tmp_path / "corpus"), str(tmp_path / "out"), str(tmp_path / "ckpt")
    write_corpus(corpus)
    env = wordcount_env(corpus, out, ckpt, spark=spark, emit="on_checkpoint")
    result, _ = run_and_kill(spark, env, "per-epoch-kill", ckpt, random.Random(3))
    assert result.restarts == 1 and result.restored_from[-1] is not None
    updates = [tuple(r) for r in read_committed(out)]
    totals = word_counts(corpus)
    check_per_epoch_updates(updates, totals)  # type: ignore[arg-type]
    # one row per changed word per checkpoint, not one per word read
    assert len(updates) <= len(totals) * len(result.checkpoints) < sum(totals.values())
