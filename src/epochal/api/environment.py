"""StreamEnvironment: where a stream program is built, and from where it is executed."""

from __future__ import annotations

import os
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any, Callable, Iterator, Literal

from ..config import CheckpointConfig, JobConfig, RestartStrategy
from ..plan.compiler import compile_job
from ..plan.job_graph import JobGraph
from ..plan.logical import LogicalGraph
from ..plan.specs import SourceSpec
from ..runtime.result import JobProgress, JobResult
from ..state.keygroups import DEFAULT_MAX_PARALLELISM
from .connector import Source
from .stream import DataStream

Executor = Literal["inprocess", "spark"]


@dataclass(frozen=True, slots=True)
class RunOverrides:
    """Settings a launcher (`epochal run`) imposes on every environment a job file creates."""

    parallelism: int | None = None
    checkpoint_directory: str | None = None
    from_checkpoint: str | None = None
    progress: Callable[[JobProgress], None] | None = None
    executor: Executor | None = None


_overrides: RunOverrides | None = None


@contextmanager
def run_overrides(overrides: RunOverrides) -> Iterator[None]:
    """Apply `overrides` to the environments created and executed inside the block."""
    global _overrides
    previous, _overrides = _overrides, overrides
    try:
        yield
    finally:
        _overrides = previous


class StreamEnvironment:
    """Builds a stream program and executes it.

    Args:
        parallelism: subtasks per operator unless an operator sets its own; defaults to the
            number of CPU cores.
        checkpoint: when and where to checkpoint (`CheckpointConfig`).
        restart: how often a failed job restarts from its latest checkpoint (default: 3 times).
        max_parallelism: the number of key groups; fixed for the life of the job's state.
        executor: `"spark"` runs on Spark (a `SparkSession` given as `spark`, or a new
            `local[*]` one); `"inprocess"` runs every task in this process (tests, debugging).
        spark: the SparkSession to run on, for `executor="spark"`.
        batch_size: records a source reads per batch.
        channel_capacity: batches a channel buffers before its producer waits (backpressure).
        seed: seeds the in-process scheduler's interleaving of tasks.
    """

    def __init__(
        self,
        parallelism: int | None = None,
        *,
        checkpoint: CheckpointConfig | None = None,
        restart: RestartStrategy | None = None,
        max_parallelism: int = DEFAULT_MAX_PARALLELISM,
        executor: Executor = "spark",
        spark: Any = None,
        batch_size: int = 1024,
        channel_capacity: int = 8,
        seed: int = 0,
    ) -> None:
        if executor not in ("inprocess", "spark"):
            raise ValueError(f"executor must be 'inprocess' or 'spark', not {executor!r}")
        self.parallelism = parallelism or os.cpu_count() or 1
        self.max_parallelism = max_parallelism
        self.checkpoint = checkpoint or CheckpointConfig()
        self.restart = restart or RestartStrategy()
        self.executor = executor
        self.spark = spark
        self.batch_size = batch_size
        self.channel_capacity = channel_capacity
        self.seed = seed
        self._graph = LogicalGraph()
        if _overrides is not None:
            if _overrides.parallelism is not None:
                self.parallelism = _overrides.parallelism
            if _overrides.executor is not None:
                self.executor = _overrides.executor
            if _overrides.checkpoint_directory is not None:
                self.checkpoint = replace(self.checkpoint, directory=_overrides.checkpoint_directory)

    def from_source(self, source: Source, *, name: str | None = None) -> DataStream:
        """A stream of the records of a replayable source."""
        if not hasattr(source, "splits") or not hasattr(source, "open_split"):
            raise TypeError(f"{source!r} is not a Source")
        op_name = name or self._graph.unique_name("source")
        node = self._graph.add(SourceSpec(op_name, op_name, source), [])
        return DataStream(self, node.id)

    def job_graph(self, name: str = "job") -> JobGraph:
        """The job graph this program compiles to (chained vertices and partitioned edges)."""
        config = JobConfig(self.checkpoint, self.restart, self.channel_capacity, self.batch_size)
        return compile_job(self._graph, name, self.parallelism, self.max_parallelism, config)

    def execute(self, name: str = "job", *, from_checkpoint: str | int | None = None) -> JobResult:
        """Run the program until its bounded inputs end (or forever, for unbounded ones).

        Args:
            name: the job's name, shown in logs and checkpoint manifests.
            from_checkpoint: `"latest"`, a checkpoint id, or a `chk-…` path in the checkpoint
                directory: start from that complete checkpoint instead of from scratch.

        Raises:
            JobFailedError: the job failed more often than the restart strategy allows.
        """
        job = self.job_graph(name)
        progress = None
        if _overrides is not None:
            progress = _overrides.progress
            if _overrides.from_checkpoint is not None:
                from_checkpoint = _overrides.from_checkpoint
        if self.executor == "inprocess":
            from ..cluster.inprocess import InProcessExecutor

            return InProcessExecutor(seed=self.seed, progress=progress).execute(job, from_checkpoint)
        from ..cluster.spark import SparkExecutor

        return SparkExecutor(self.spark, progress=progress).execute(job, from_checkpoint)
