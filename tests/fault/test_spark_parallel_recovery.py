"""Parallel recovery from chained backups on Spark (ChronoStream §III-B, §III-E): a worker's
process SIGKILLed, its Spark task living on; the peers holding copies of its checkpoint files
restore its key groups, its new process gets them back by a live move, and every update is
committed once."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

from epochal import CheckpointConfig, RestartStrategy, StateConfig, StreamEnvironment
from epochal.connectors import FileSink, TextFileSource, read_committed
from epochal.state.storage import CheckpointStorage
from spark_jobs import expected_updates, launches, run_and_kill, slow_split, write_corpus

pytestmark = [pytest.mark.spark, pytest.mark.fault]


def _env(spark: Any, corpus: str, out: str, ckpt: str, replicas: int) -> StreamEnvironment:
    env = StreamEnvironment(
        parallelism=2, executor="spark", spark=spark, batch_size=64,
        checkpoint=CheckpointConfig(interval=0.3, directory=ckpt, retain=1_000),
        state=StateConfig(backup_replicas=replicas),
        restart=RestartStrategy(max_restarts=3),
    )
    env.from_source(TextFileSource(corpus)).flat_map(slow_split).key_by(lambda w: w).count().uid("counts").sink_to(
        FileSink(out))
    return env


def _owners(ckpt: str) -> list[tuple[int, set[int]]]:
    """Per complete checkpoint: the subtasks its routing table gives key groups to."""
    storage = CheckpointStorage(ckpt, create=False)
    out = []
    for cid in storage.complete_checkpoints():
        routing = storage.resolve(cid).routing
        out.append((cid, set(routing.owners) if routing is not None else {0, 1}))
    return out


@pytest.mark.parametrize("replicas", [1, 0])
def test_a_killed_worker_recovers_from_its_peers_copies_and_gets_its_key_groups_back(
    spark: Any, tmp_path: Path, replicas: int
) -> None:
    corpus = str(tmp_path / "corpus")
    write_corpus(corpus)
    for trial in range(2):
        out, ckpt = str(tmp_path / f"out{trial}"), str(tmp_path / f"ckpt{trial}")
        env = _env(spark, corpus, out, ckpt, replicas)
        result, executor = run_and_kill(spark, env, "recovered", ckpt, random.Random(trial), delay=(0.0, 1.0))
        assert sorted(map(tuple, read_committed(out))) == expected_updates(corpus), f"trial {trial}"
        assert result.restarts == 1 and launches(executor) == 1, f"trial {trial}: {executor.timeline}"
        assert result.restored_from[-1] is not None
        if replicas:
            # the restore read copies (the survivor's own files, the holder's copies of the dead
            # worker's), and the dead worker's key groups went to its holder, then came back
            assert executor.local_restore_bytes[-1] > 0, executor.local_restore_bytes
            (table,) = executor.recovery_tables
            assert len(set(table.owners)) == 1, "the lost key groups were not restored on the holder"
            assert _owners(ckpt)[-1][1] == {0, 1}, "the key groups were not given back"
        else:
            assert executor.local_restore_bytes[-1] == 0 and not executor.recovery_tables
