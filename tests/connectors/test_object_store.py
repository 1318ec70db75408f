"""TextFileSource reads through pyarrow.fs: an `s3://` prefix on a real S3-compatible server
(moto, on 127.0.0.1) gives the lines a local directory gives, is watched like one, and a job
with its checkpoints and its Parquet output on the same server restores from them."""

from __future__ import annotations

import collections
import random
import uuid
from pathlib import Path
from typing import Any

import pyarrow.dataset as ds
import pytest

from epochal import CheckpointConfig, JobCancelledError, JobFailedError, RestartStrategy, StreamEnvironment
from epochal.connectors import ParquetSink, TextFileSource
from epochal.errors import EpochalError, InjectedFailure
from spark_jobs import wait_until


def _put(fs: Any, key: str, text: str) -> None:
    with fs.open_output_stream(key) as out:  # an S3 PUT: the object appears whole, or not at all
        out.write(text.encode())


def _lines(source: TextFileSource) -> list[str]:
    out: list[str] = []
    for split in source.splits():
        reader = source.open_split(split, None)
        while (batch := reader.read(1000)) is not None:
            out.extend(batch.column(0).to_pylist())
    return out


def _corpus(seed: int, lines: int) -> str:
    rng = random.Random(seed)
    return "".join(f"w{rng.randrange(30)} w{rng.randrange(30)} w{rng.randrange(30)}\n" for _ in range(lines))


def test_an_s3_prefix_reads_like_a_local_directory(s3: Any, tmp_path: Path) -> None:
    fs, bucket = s3.filesystem(), f"in-{uuid.uuid4().hex[:8]}"
    fs.create_dir(bucket)
    files = {"a.txt": _corpus(1, 500), "sub/b.txt": _corpus(2, 700), "_SUCCESS": "", "sub/.c.tmp": "hidden\n"}
    for name, text in files.items():
        _put(fs, f"{bucket}/data/{name}", text)
        (tmp_path / "data" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "data" / name).write_text(text)
    remote = TextFileSource(s3.uri(bucket, "data"), split_size=3_000)
    local = TextFileSource(tmp_path / "data", split_size=3_000)
    remote.check()
    assert [s.split_id for s in remote.splits()] == [s.split_id for s in local.splits()]
    assert len(remote.splits()) > 2  # files cut into several splits, each line in exactly one
    assert _lines(remote) == _lines(local) == (files["a.txt"] + files["sub/b.txt"]).splitlines()
    with pytest.raises(EpochalError, match="no such file or directory"):
        TextFileSource(s3.uri(bucket, "missing")).check()


def test_a_job_on_s3_with_a_crash_counts_every_watched_object_once(s3: Any) -> None:
    """Input, checkpoints and output all on the S3 server; objects arrive while the job runs."""
    fs, bucket = s3.filesystem(), f"job-{uuid.uuid4().hex[:8]}"
    fs.create_dir(bucket)
    _put(fs, f"{bucket}/inbox/f0.txt", _corpus(0, 400) + "crash-here\n")
    crashed: list[bool] = []

    def split(line: str) -> list[str]:
        if line == "crash-here" and not crashed:
            crashed.append(True)
            raise InjectedFailure("crash")
        return line.split()

    env = StreamEnvironment(
        parallelism=2,
        executor="inprocess",
        checkpoint=CheckpointConfig(interval=0.1, directory=s3.uri(bucket, "ckpt")),
        restart=RestartStrategy(max_restarts=3, delay=0.0),
    )
    lines = env.from_source(TextFileSource(s3.uri(bucket, "inbox"), watch=0.1, split_size=2_000))
    counts = lines.flat_map(split).key_by(lambda w: w).count(emit="on_checkpoint")
    # no _spark_metadata log: S3 cannot create a file only if it is absent, which the log needs
    counts.sink_to(ParquetSink(s3.uri(bucket, "out"), spark_metadata=False))
    handle = env.execute_async("on-s3")
    for i in range(1, 4):
        _put(fs, f"{bucket}/inbox/f{i}.txt", _corpus(i, 400))
    totals = collections.Counter(
        w for i in range(4) for w in (_corpus(i, 400) + ("crash-here\n" if i == 0 else "")).split()
    )

    def committed() -> list[tuple[str, int]]:
        try:
            table = ds.dataset(f"{bucket}/out", filesystem=fs, format="parquet").to_table()
        except (FileNotFoundError, OSError):
            return []
        if table.num_columns < 2:  # no file committed yet
            return []
        return list(zip(table.column(0).to_pylist(), table.column(1).to_pylist(), strict=True))

    def newest() -> dict[str, int]:
        return {w: n for w, n in sorted(committed(), key=lambda r: r[1])}

    wait_until(lambda: newest() == dict(totals) or handle.done(), "every object's words are committed")
    handle.cancel()
    with pytest.raises(JobCancelledError):
        handle.result(timeout=60)
    assert crashed and handle.status().restarts == 1
    updates = committed()
    assert newest() == dict(totals)
    for word in totals:  # per word, the committed counts only rise: no epoch committed twice
        seen = [n for w, n in updates if w == word]
        assert seen == sorted(set(seen)), (word, seen)


def test_a_parquet_sink_whose_log_s3_cannot_share_fails_before_the_job_starts(s3: Any) -> None:
    fs, bucket = s3.filesystem(), f"log-{uuid.uuid4().hex[:8]}"
    fs.create_dir(bucket)
    _put(fs, f"{bucket}/in/a.txt", "a b\n")
    env = StreamEnvironment(parallelism=2, executor="inprocess", restart=RestartStrategy(max_restarts=3))
    env.from_source(TextFileSource(s3.uri(bucket, "in"))).sink_to(ParquetSink(s3.uri(bucket, "out")))
    with pytest.raises(EpochalError, match="cannot share a _spark_metadata log") as raised:
        env.execute("shared-log")
    assert not isinstance(raised.value, JobFailedError)  # refused at start, not failed after attempts
