"""Loop jobs whose every output is known in advance, for the loop tests in-process and on Spark
(importable by worker processes when shipped by value: `cloudpickle.register_pickle_by_value`).

- the *halving loop*: numbers halved until zero, the feedback keyed, every value emitted; a
  busy loop (issue 37: 1.6 million values round the loop for 80,000 inputs);
- the *nested loop*: an inner loop halves a value until it is at most 1, an outer loop starts it
  again from its first value as many passes as the record asks; every value emitted.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

from epochal import CheckpointConfig, DataStream, RestartStrategy, StreamEnvironment
from epochal.connectors import FileSink
from epochal.testing import ListSource

Record = tuple[int, int, int]  # (value, passes left, the value a pass starts from)


def halvings(values: Iterable[int]) -> list[int]:
    """Every value the halving loop computes from `values`, each once."""
    return sorted(v >> k for v in values for k in range(1, v.bit_length() + 1))


def halving_env(out: str, ckpt: str, values: list[int], *, spark: Any = None, parallelism: int = 2,
                slow: float = 0.0, interval: float = 0.3, batch_size: int = 64) -> StreamEnvironment:
    env = StreamEnvironment(
        parallelism=parallelism, spark=spark, batch_size=batch_size,
        checkpoint=CheckpointConfig(interval=interval, directory=ckpt), restart=RestartStrategy(max_restarts=3),
    )

    def halve(n: int) -> int:
        if slow:
            time.sleep(slow)
        return n // 2

    def body(loop: DataStream) -> tuple[DataStream, DataStream]:
        halved = loop.map(halve, name="halve")
        return halved.filter(lambda n: n > 0, name="again").key_by(lambda n: n), halved

    env.from_source(ListSource(values, splits=parallelism)).iterate(body, name="loop").sink_to(FileSink(out))
    return env


def nested_expected(inputs: Iterable[Record]) -> list[Record]:
    out = []
    for value, passes, start in inputs:
        for left in range(passes, -1, -1):
            v = value if left == passes else start
            while True:
                v //= 2
                out.append((v, left, start))
                if v <= 1:
                    break
    return sorted(out)


def nested_env(out: str, ckpt: str, inputs: list[Record], *, spark: Any = None, slow: float = 0.0,
               interval: float = 0.3, batch_size: int = 32) -> StreamEnvironment:
    env = StreamEnvironment(
        parallelism=2, spark=spark, batch_size=batch_size,
        checkpoint=CheckpointConfig(interval=interval, directory=ckpt), restart=RestartStrategy(max_restarts=3),
    )

    def halve(r: Record) -> Record:
        if slow:
            time.sleep(slow)
        return (r[0] // 2, r[1], r[2])

    def inner(loop: DataStream) -> tuple[DataStream, DataStream]:
        half = loop.map(halve, name="halve")
        return half.filter(lambda r: r[0] > 1, name="again").key_by(lambda r: r[0]), half

    def outer(loop: DataStream) -> tuple[DataStream, DataStream]:
        values = loop.iterate(inner, name="inner")
        settled = values.filter(lambda r: r[0] <= 1 and r[1] > 0, name="settled")
        return settled.map(lambda r: (r[2], r[1] - 1, r[2]), name="restart").key_by(lambda r: r[2]), values

    env.from_source(ListSource(inputs, splits=2)).iterate(outer, name="outer").sink_to(FileSink(out))
    return env
