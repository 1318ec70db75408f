"""A job file for `epochal run` tests: a Delta table followed (`DeltaSource(follow=True)`) into
another Delta table (`DeltaSink`); the tables and the checkpoint directory come from the
environment. It runs until cancelled."""

import os
import time
from typing import Any

import pyarrow as pa

from epochal import CheckpointConfig, RestartStrategy, StreamEnvironment
from epochal.connectors import DeltaSink, DeltaSource


def slow(row: tuple[Any, ...]) -> tuple[Any, ...]:
    time.sleep(0.001)  # stretch the run so that a kill lands mid-stream
    return row


env = StreamEnvironment(
    parallelism=2, batch_size=32,
    checkpoint=CheckpointConfig(interval=0.3, directory=os.environ["EPOCHAL_TEST_CKPT"]),
    restart=RestartStrategy(max_restarts=3),
)
schema = pa.schema([("id", pa.int64()), ("region", pa.string())])
(env.from_source(DeltaSource(os.environ["EPOCHAL_TEST_DELTA_IN"], follow=True, poll_interval=0.1))
    .map(slow)
    .sink_to(DeltaSink(os.environ["EPOCHAL_TEST_DELTA_OUT"], schema=schema)))
if __name__ == "__main__":
    env.execute("delta-follow")
