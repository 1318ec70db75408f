"""Async I/O across a SIGKILL on local Spark: a worker dies with lookups in flight, and every
result is committed exactly once (requests in flight at a checkpoint are part of it, and are
made again after the restore: Flink's AsyncWaitOperator)."""

from __future__ import annotations

import collections
import os
import random
from pathlib import Path
from typing import Any

import pytest

from epochal.connectors import read_committed
from epochal.runtime.task.snapshots import read_operator_restore
from epochal.state.keygroups import KeyGroupRange
from epochal.state.storage import CheckpointStorage
from spark_jobs import async_lookup_env, launches, run_and_kill, write_corpus

pytestmark = [pytest.mark.spark, pytest.mark.fault]


def _words(corpus: str) -> collections.Counter[tuple[str, int]]:
    counts: collections.Counter[tuple[str, int]] = collections.Counter()
    for name in sorted(os.listdir(corpus)):
        with open(os.path.join(corpus, name)) as f:
            counts.update((w, len(w)) for line in f for w in line.split())
    return counts


def _in_flight_at(ckpt: str, checkpoint_id: int) -> int:
    """How many records the `lookup` operator had in flight (or waiting) in a checkpoint."""
    storage = CheckpointStorage(ckpt)
    manifest = storage.load_manifest(checkpoint_id)
    _, states = read_operator_restore(storage, manifest, "lookup", KeyGroupRange(0, 128), 128)
    return sum(len(items) for snap in states if snap is not None for name, _, items in snap.items()
               if name == "__in_flight__")


@pytest.mark.parametrize("ordered", [True, False])
def test_sigkill_with_lookups_in_flight_commits_every_result_once(spark: Any, tmp_path: Path, ordered: bool) -> None:
    corpus = str(tmp_path / "corpus")
    # long enough that periodic checkpoints complete while it runs: on a loaded machine the first
    # complete checkpoint of a 400-line corpus was its final one, the workers gone before the kill
    write_corpus(corpus, files=4, lines=1500)
    expected = _words(corpus)
    restored_in_flight = 0
    for trial in range(3):
        out, ckpt = str(tmp_path / f"out{trial}"), str(tmp_path / f"ckpt{trial}")
        env = async_lookup_env(corpus, out, ckpt, spark=spark, ordered=ordered)
        result, executor = run_and_kill(spark, env, "lookups", ckpt, random.Random(trial + 10 * ordered),
                                        after_checkpoint=True, delay=(0.0, 1.5))
        committed = collections.Counter(tuple(r) for r in read_committed(out))
        assert committed == expected, f"trial {trial}: lost {expected - committed}, twice {committed - expected}"
        assert result.restarts == 1 and launches(executor) == 1, f"trial {trial}"
        restored = result.restored_from[-1]
        assert restored is not None, f"trial {trial}: the kill came after a checkpoint"
        restored_in_flight += _in_flight_at(ckpt, restored)
    assert restored_in_flight > 0, "the restored checkpoints held requests in flight"
