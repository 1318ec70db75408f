"""Fixtures for the API and operator tests: in-process environments, runs, and probing sinks.

Every job here runs in the in-process executor. `make_env` fails a job on its first error
unless a test asks for restarts, so a broken operator shows up as one clear `JobFailedError`
instead of several retried attempts. `MakeEnv`, `RunVirtual` and `ProbeSinks` are the fixtures'
types, for the tests' annotations.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pytest

from epochal import RestartStrategy, Sink, SinkWriter, StreamEnvironment
from epochal.cluster.inprocess import InProcessExecutor
from epochal.runtime.result import JobResult
from epochal.runtime.wire.batches import to_records


class _ProbeWriter(SinkWriter):
    def __init__(self, sink: ProbeSink, subtask: int) -> None:
        self.sink = sink
        self.subtask = subtask

    def write(self, batch: Any) -> None:
        with self.sink.lock:
            self.sink.batches.append((self.subtask, batch))
            self.sink.records.extend((self.subtask, r) for r in to_records(batch))


class ProbeSink(Sink):
    """A sink without commits that remembers which subtask wrote which record and batch.

    It shows what the committing sinks hide: the subtask a record reached (partitioning
    tests) and the shape of the batches (a list, or an Arrow batch on the columnar path).
    """

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.parallelism: int | None = None
        self.records: list[tuple[int, Any]] = []
        self.batches: list[tuple[int, Any]] = []

    def create_writer(self, subtask: int, parallelism: int) -> SinkWriter:
        self.parallelism = parallelism
        return _ProbeWriter(self, subtask)

    def by_subtask(self) -> dict[int, list[Any]]:
        out: dict[int, list[Any]] = {i: [] for i in range(self.parallelism or 0)}
        for subtask, record in self.records:
            out[subtask].append(record)
        return out

    def values(self) -> list[Any]:
        return [record for _, record in self.records]

    def arrow_batches(self) -> list[pa.RecordBatch]:
        return [b for _, b in self.batches if isinstance(b, pa.RecordBatch)]


MakeEnv = Callable[..., StreamEnvironment]
RunVirtual = Callable[..., JobResult]
ProbeSinks = Callable[[], ProbeSink]


@pytest.fixture
def make_env() -> MakeEnv:
    """`make_env(parallelism=2, **options)`: an in-process environment, no restarts by default."""

    def make(parallelism: int = 2, **options: Any) -> StreamEnvironment:
        options.setdefault("executor", "inprocess")
        options.setdefault("restart", RestartStrategy.none())
        return StreamEnvironment(parallelism, **options)

    return make


@pytest.fixture
def run_virtual() -> RunVirtual:
    """`run_virtual(env, seed=0, step_time=0.001)`: execute on a virtual clock, replayably."""

    def run(env: StreamEnvironment, *, seed: int = 0, step_time: float = 0.001, name: str = "test") -> JobResult:
        executor = InProcessExecutor(seed=seed, virtual_time=True, step_time=step_time)
        return executor.execute(env.job_graph(name))

    return run


@pytest.fixture
def probe_sink() -> ProbeSinks:
    """A factory of `ProbeSink`s (a test may need several)."""
    return ProbeSink
