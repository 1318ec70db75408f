"""A job for live logic patch tests on Spark (shipped by value: `cloudpickle.register_pickle_by_value`):
a paced sequence tagged by the function's version, into a FileSink whose file names say the
checkpoint that committed them."""

from __future__ import annotations

import json
import os
from typing import Any

from epochal import CheckpointConfig, RestartStrategy, StreamEnvironment
from epochal.connectors import FileSink
from spark_jobs import EndlessSource


def tag_old(x: int) -> tuple[int, str]:
    return (x, "old")


def tag_new(x: int) -> tuple[int, str]:
    return (x, "new")


def tagged_env(out: str, ckpt: str, records: int, *, spark: Any = None, interval: float = 0.2) -> StreamEnvironment:
    env = StreamEnvironment(parallelism=2, spark=spark, checkpoint=CheckpointConfig(interval=interval, directory=ckpt),
                            restart=RestartStrategy(max_restarts=3))
    env.from_source(EndlessSource(stop_at=records)).rebalance().map(tag_old, name="tag").sink_to(FileSink(out))
    return env


def committed_by_checkpoint(out: str) -> list[tuple[int, int, str]]:
    """`(checkpoint, value, tag)` of every committed record (a file's name holds its checkpoint)."""
    found = []
    for name in sorted(os.listdir(out)):
        if name.startswith("part-") and name.endswith(".jsonl"):
            checkpoint = int(name.split("-")[2])
            with open(os.path.join(out, name)) as f:
                found.extend((checkpoint, *json.loads(line)) for line in f)
    return found
