"""Exactly-once under injected failures, in the in-process executor (fast, many trials).

A UDF raises once at a random record (first attempt only); the job restarts from its latest
complete checkpoint; the committed output must equal the failure-free run's: every `(word, n)`
update exactly once.
"""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

from epochal import CheckpointConfig, StateConfig, StreamEnvironment
from epochal.cluster.inprocess import InProcessExecutor
from epochal.connectors import FileSink, TextFileSource, read_committed
from epochal.plan.job_graph import JobGraph
from spark_jobs import expected_updates, write_corpus

TRIALS = 24


def _job(corpus: str, out: str, ckpt: str, fail_at: int | None, seed: int) -> JobGraph:
    calls = {"n": 0, "failed": False}

    def split(line: str) -> list[str]:
        calls["n"] += 1
        if fail_at is not None and not calls["failed"] and calls["n"] == fail_at:
            calls["failed"] = True
            raise ValueError(f"injected at record {fail_at}")
        return line.split()

    env = StreamEnvironment(
        parallelism=2, executor="inprocess", seed=seed, batch_size=32,
        checkpoint=CheckpointConfig(interval=0.005, directory=ckpt),
        # odd seeds serialise every snapshot asynchronously: copy-on-write under failures too
        state=StateConfig(inline_snapshot_entries=0 if seed % 2 else 20_000),
    )
    env.from_source(TextFileSource(corpus)).flat_map(split).key_by(lambda w: w).count().sink_to(FileSink(out))
    return env.job_graph("wordcount")


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = str(tmp_path_factory.mktemp("corpus"))
    write_corpus(path, files=3, lines=700)
    return path


def _lines(corpus: str) -> int:
    total = 0
    for name in os.listdir(corpus):
        with open(os.path.join(corpus, name)) as f:
            total += sum(1 for _ in f)
    return total


def test_a_udf_failing_once_at_random_records_changes_nothing_committed(corpus: str, tmp_path: Path) -> None:
    expected = expected_updates(corpus)
    lines = _lines(corpus)
    restored = 0
    for trial in range(TRIALS):
        rng = random.Random(trial)
        out, ckpt = str(tmp_path / f"out{trial}"), str(tmp_path / f"ckpt{trial}")
        job = _job(corpus, out, ckpt, fail_at=rng.randrange(1, lines), seed=trial)
        result = InProcessExecutor(seed=trial, virtual_time=True).execute(job)
        assert result.restarts == 1, f"trial {trial}"
        assert sorted(map(tuple, read_committed(out))) == expected, f"trial {trial}"
        restored += result.restored_from[-1] is not None
    # Failures early in the stream come before the first checkpoint and restart from scratch;
    # the rest must restore state from a checkpoint.
    assert restored >= TRIALS // 3, "too few failures restored from a checkpoint"


def test_a_corrupt_latest_checkpoint_is_skipped_for_the_previous_one(corpus: str, tmp_path: Path) -> None:
    out, ckpt = str(tmp_path / "out"), str(tmp_path / "ckpt")
    InProcessExecutor(seed=1, virtual_time=True).execute(_job(corpus, out, ckpt, None, 1))
    complete = sorted(d for d in os.listdir(ckpt) if os.path.exists(os.path.join(ckpt, d, "MANIFEST.json")))
    assert len(complete) >= 2
    newest = os.path.join(ckpt, complete[-1])
    victim = next(os.path.join(newest, f) for f in sorted(os.listdir(newest)) if f.endswith((".keyed", ".merged")))
    data = bytearray(Path(victim).read_bytes())
    data[len(data) // 2] ^= 0xFF
    Path(victim).write_bytes(bytes(data))

    # Resuming "latest" must not load the corrupt checkpoint but the one before it. The job master
    # reads every byte of the checkpoint before any task restores it (issue 40): the corrupt one
    # is refused before the first attempt, no task fails, and the result says which and why. (Its
    # output after the previous checkpoint was committed by the corrupt one already, so it is
    # written again: sinks that skip an epoch they committed are issue 38's.)
    result = InProcessExecutor(seed=2, virtual_time=True).execute(
        _job(corpus, out, ckpt, None, 2), from_checkpoint="latest"
    )
    corrupt, previous = (int(name.split("-")[1]) for name in complete[-2:][::-1])
    assert result.restored_from == (previous,)
    assert result.restarts == 0 and result.failures == ()
    (refused,) = result.refused
    assert refused.checkpoint_id == corrupt
    assert f"checkpoint {corrupt}" in refused.reason and os.path.basename(victim) in refused.reason
