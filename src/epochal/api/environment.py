"""StreamEnvironment: where a stream program is built, and from where it is executed (most of
its lines document its arguments, which users read in their editors; one execution is a
`Launch`, api/launch.py)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import replace
from typing import Any, TypeVar

from ..config import (
    DEFAULT_GC_THRESHOLD,
    CheckpointConfig,
    JobConfig,
    NetworkConfig,
    RecoveryConfig,
    RestartStrategy,
    StateConfig,
    TlsConfig,
)
from ..plan.blueprint import JobBlueprint
from ..plan.job_graph import JobGraph
from ..plan.logical import LogicalGraph
from ..plan.specs import SourceSpec
from ..runtime.result import JobResult
from ..state.keygroups import DEFAULT_MAX_PARALLELISM, MAX_KEY_GROUPS
from ..validation import (
    check_choice,
    check_gc_threshold,
    check_has_methods,
    check_instance,
    check_int,
    check_name,
    check_seconds,
)
from .builder import GraphBuilder
from .checks import OnErrorChoice, on_error_policy
from .connector import Sink, Source
from .handle import JobHandle
from .launch import Host, Launch, WebAddress
from .overrides import EXECUTORS, Executor, current_overrides
from .sql import SqlMethods
from .stream import DataStream
from .tables import resolve_table
from .time import WatermarkStrategy

T = TypeVar("T")  # a source's records


class StreamEnvironment(SqlMethods):
    """Builds a stream program and executes it.

    Every argument is checked here: a value the job could not run with raises `TypeError` or
    `ValueError` naming the argument.

    Args:
        parallelism: subtasks per operator unless an operator sets its own; `None` (the
            default) takes the number of CPU cores.
        checkpoint: when and where to checkpoint (`CheckpointConfig`).
        restart: how often a failed job restarts from its latest checkpoint (default: 3 times).
        max_parallelism: the number of key groups (1 to 32,768; default 128, or
            `state`'s `StateConfig(max_parallelism=...)`); fixed for the life of the job's state,
            changed through a savepoint (`epochal savepoint rescale-groups`).
        executor: `"spark"` runs on Spark (a `SparkSession` given as `spark`, or a new
            `local[*]` one); `"inprocess"` runs every task in this process (tests, debugging).
        spark: the SparkSession to run on, for `executor="spark"`.
        batch_size: records a source reads per batch.
        channel_capacity: batches a channel buffers before its producer waits (backpressure).
        seed: seeds the in-process scheduler's interleaving of tasks.
        state_backend: where keyed state lives: `"memory"` (default) or `"disk"` (RocksDB, for
            state larger than memory); shorthand for `state=StateConfig(backend=...)`.
        state: the full keyed-state configuration (`StateConfig`): backend, incremental
            checkpoints and their compaction.
        gc_threshold: Python's garbage-collector thresholds (`gc.set_threshold`) while the
            job runs; the default collects young objects every 50,000 allocations instead of
            700, which made the ABS benchmark job about 13 % faster. `None` keeps the process's
            settings.
        dead_letter: the job's dead-letter sink (any `Sink`, e.g. `FileSink("dlq/")`): where
            operators built with `on_error="dead_letter"` send the records their code fails
            on, as `{"operator", "record", "error", "position"}`, exactly once
            (docs/bad-records.md).
        web_port: serve the job's control endpoint on this port (`0` picks a free one) while
            it runs; `None` (the default) serves none. Its URL and the token actions need are
            printed at start and are a `JobHandle`'s `web_url` and `token`.
        web_host: the interface the endpoint binds; `127.0.0.1` keeps it on this machine.
        metrics_interval: seconds between two reports of live metrics from the workers (the
            job master publishes a snapshot twice as often); `None` gathers no live metrics
            (the dashboard, `/metrics` and progress stay empty until the end; the `JobResult`
            is the same).
        max_workers: subtasks of operators at the default parallelism (on Spark, the stage's
            workers); `None`: the parallelism. Those beyond it stand by with no key groups and no
            splits: a rescale up to `max_workers` and back moves key groups live, no restart,
            no replay (`docs/concepts/elasticity.md`; jobs with loops or unaligned checkpoints
            restart in the running stage instead).
        tls: encrypt the links between the job's processes on Spark (`TlsConfig`: certificate,
            key and authority files, at the same paths on the driver and every executor); None
            takes `EPOCHAL_TLS_CERT` (with `EPOCHAL_TLS_KEY`, `EPOCHAL_TLS_CA`) if set. Links are
            authenticated either way (docs/operations.md, Security); shorthand for
            `network=NetworkConfig(tls=...)`.
        network: the links' full configuration (`NetworkConfig`): TLS, the largest frame, the
            handshake's timeout.
        recovery: what survivors do when a worker is lost (`RecoveryConfig`): by default every
            task restores the last checkpoint; with `RecoveryConfig(survivors=True)` only the
            lost worker's tasks do, where that is sound.
    """

    def __init__(
        self,
        parallelism: int | None = None,
        *,
        checkpoint: CheckpointConfig | None = None,
        restart: RestartStrategy | None = None,
        max_parallelism: int | None = None,
        executor: Executor = "spark",
        spark: Any = None,
        batch_size: int = 1024,
        channel_capacity: int = 8,
        seed: int = 0,
        state_backend: str | None = None,
        state: StateConfig | None = None,
        gc_threshold: tuple[int, int, int] | None = DEFAULT_GC_THRESHOLD,
        dead_letter: Sink | None = None,
        web_port: int | None = None,
        web_host: str = "127.0.0.1",
        metrics_interval: float | None = 1.0,
        max_workers: int | None = None,
        recovery: RecoveryConfig | None = None,
        tls: TlsConfig | None = None,
        network: NetworkConfig | None = None,
    ) -> None:
        self.state = StateConfig() if state is None else check_instance("state", state, StateConfig)
        self.max_parallelism = _max_parallelism(max_parallelism, self.state)
        if parallelism is None:
            self.parallelism = os.cpu_count() or 1
        else:
            self.parallelism = check_int("parallelism", parallelism)
            _check_within_max(parallelism, self.max_parallelism)
        self.checkpoint = CheckpointConfig() if checkpoint is None else check_instance(
            "checkpoint", checkpoint, CheckpointConfig
        )
        self.restart = RestartStrategy() if restart is None else check_instance("restart", restart, RestartStrategy)
        check_choice("executor", executor, EXECUTORS)
        self.executor: Executor = executor
        # a classic or a Spark Connect session (the latter has no sparkContext: it launches through DataFrames)
        if spark is not None and not (hasattr(spark, "createDataFrame") and hasattr(spark, "conf")):
            raise TypeError(f"spark must be a SparkSession or None, got {spark!r} ({type(spark).__name__})")
        self.spark = spark
        self.batch_size = check_int("batch_size", batch_size)
        self.channel_capacity = check_int("channel_capacity", channel_capacity)
        self.seed = check_int("seed", seed, minimum=None)
        self.gc_threshold = check_gc_threshold("gc_threshold", gc_threshold)
        if dead_letter is not None:
            check_has_methods("dead_letter", dead_letter, "Sink", ("create_writer",))
        self.dead_letter = dead_letter
        self.web_port = None if web_port is None else check_int("web_port", web_port, minimum=0)
        self.web_host = check_name("web_host", web_host)
        self.metrics_interval = (
            None if metrics_interval is None else check_seconds("metrics_interval", metrics_interval, or_none=True)
        )
        self.max_workers = None if max_workers is None else check_int("max_workers", max_workers)
        self.recovery = RecoveryConfig() if recovery is None else check_instance("recovery", recovery, RecoveryConfig)
        if self.max_workers is not None and self.max_workers < self.parallelism:
            raise ValueError(f"max_workers ({max_workers}) must be at least the parallelism ({self.parallelism})")
        self.network = NetworkConfig() if network is None else check_instance("network", network, NetworkConfig)
        if tls is not None:
            self.network = replace(self.network, tls=check_instance("tls", tls, TlsConfig))
        elif self.network.tls is None and (from_env := TlsConfig.from_environment()) is not None:
            self.network = replace(self.network, tls=from_env)
        if state_backend is not None:
            backend = check_choice("state_backend", state_backend, ("memory", "disk"))
            self.state = replace(self.state, backend=backend)  # type: ignore[arg-type]
        self._builder = GraphBuilder()
        if (overrides := current_overrides()) is not None:
            if overrides.parallelism is not None:
                self.parallelism = overrides.parallelism
            if overrides.executor is not None:
                self.executor = overrides.executor
            if overrides.checkpoint_directory is not None:
                self.checkpoint = replace(self.checkpoint, directory=overrides.checkpoint_directory)
            if overrides.web_port is not None:
                self.web_port = overrides.web_port
            if overrides.spark is not None and self.spark is None:
                self.spark = overrides.spark

    def from_source(
        self,
        source: Source[T],
        *,
        name: str | None = None,
        watermarks: WatermarkStrategy | None = None,
        on_error: OnErrorChoice = "fail",
    ) -> DataStream[T]:
        """A stream of the records of a replayable source.

        Args:
            source: the source.
            name: the operator's name (and default uid).
            watermarks: where each record's event time is and how out of order records may be;
                every split generates its own watermark (see `WatermarkStrategy`).
            on_error: what happens to input the source's readers cannot parse (a malformed JSON
                or CSV line): `"fail"` fails the job naming the file and the place, `"skip"`
                drops it (counted), `"dead_letter"` sends the raw line to the job's dead-letter
                sink, exactly once. Readers that cannot step over bad input always fail.
        """
        check_has_methods("source", source, "Source", ("splits", "open_split"))
        if watermarks is not None and not isinstance(watermarks, WatermarkStrategy):
            raise TypeError(f"watermarks must be a WatermarkStrategy, got {watermarks!r}")
        policy = on_error_policy(self, on_error, "from_source")
        strategy = watermarks.spec if watermarks is not None else None
        node = self._builder.add(lambda n: SourceSpec(n, n, source, strategy, policy), "source", name)
        return DataStream[T](self, node)

    def from_table(
        self,
        spark: Any,
        table: str,
        *,
        columns: Sequence[str] | None = None,
        name: str | None = None,
        watermarks: WatermarkStrategy | None = None,
    ) -> DataStream[Any]:
        """A stream of the rows of a Spark catalog table (Parquet or Delta), read through its
        files as a replayable source: Arrow batches, a row group per split, partition columns
        included. A Delta table is read at the version it has now, pinned for every restore.

        Args:
            spark: a SparkSession (classic or Connect) whose catalog knows `table`.
            table: the table's name, e.g. `"db.events"`.
            columns: the columns to read (all by default).
        """
        source = resolve_table(spark, check_name("table", table), columns)
        return self.from_source(source, name=name, watermarks=watermarks)

    @property
    def _graph(self) -> LogicalGraph:
        """The logical graph recorded so far (read only: streams write through `_builder`)."""
        return self._builder.graph

    def job_graph(self, name: str = "job") -> JobGraph:
        """The job graph this program compiles to (chained vertices and partitioned edges)."""
        return self._blueprint(name).compile(self.parallelism)

    def _blueprint(self, name: str) -> JobBlueprint:
        """The program as recorded, with its configuration: what a rescale compiles again."""
        check_name("name", name)
        config = JobConfig(
            self.checkpoint, self.restart, self.channel_capacity, self.batch_size, self.state, self.gc_threshold,
            self.metrics_interval, self.max_workers, self.recovery, self.network,
        )
        return JobBlueprint(self._graph, name, self.max_parallelism, config, self.dead_letter)

    def execute(
        self,
        name: str = "job",
        *,
        from_checkpoint: str | int | None = None,
        allow_non_restored_state: bool = False,
    ) -> JobResult:
        """Run the program until its bounded inputs end (or forever, for unbounded ones).

        Args:
            name: the job's name, shown in logs and checkpoint manifests.
            from_checkpoint: `"latest"`, a checkpoint id, a `chk-…` path in the checkpoint
                directory, or a savepoint directory (anywhere): start from that complete
                checkpoint instead of from scratch. The parallelism may differ from the one
                the checkpoint was taken with; state is matched to operators by uid.
                `"auto"`: the latest complete checkpoint if the checkpoint directory holds
                one, else a fresh start (for a job whose driver a supervisor restarts; the
                same call is right the first time and after every restart).
            allow_non_restored_state: start even if the checkpoint holds state of an operator
                uid this job no longer has (that state is dropped); otherwise that is an error.

        Raises:
            JobFailedError: the job failed more often than the restart strategy allows.
            JobCancelledError: the job was cancelled through its control endpoint.
            CheckpointError: the checkpoint holds state no operator of this job claims.
            NoCheckpointError: `from_checkpoint` names no complete checkpoint, or the job has
                no checkpoint directory to resume from.
        """
        return self._launch(name, from_checkpoint, allow_non_restored_state).run_serving()

    def execute_async(
        self,
        name: str = "job",
        *,
        from_checkpoint: str | int | None = None,
        allow_non_restored_state: bool = False,
    ) -> JobHandle:
        """Start the program in the background and return its `JobHandle` at once.

        Takes the arguments of `execute()`; what `execute()` would raise, `handle.result()`
        raises. The job runs on a thread of this process (its tasks on Spark's executors, or
        on that thread in-process); the control endpoint, if `web_port` is set, serves it too.
        """
        return self._launch(name, from_checkpoint, allow_non_restored_state).in_background()

    def _launch(self, name: str, from_checkpoint: str | int | None, allow_non_restored_state: bool) -> Launch:
        host = Host(self.executor, self.seed, self.spark)
        web = None if self.web_port is None else WebAddress(self.web_host, self.web_port)
        return Launch(self._blueprint(name), self.parallelism, from_checkpoint, allow_non_restored_state, host, web,
                      current_overrides())


def _max_parallelism(given: int | None, state: StateConfig) -> int:
    """The job's number of key groups: `StreamEnvironment(max_parallelism=...)` or the state
    config's (the same if both are given), else the default."""
    if given is not None:
        check_int("max_parallelism", given, maximum=MAX_KEY_GROUPS)
        if state.max_parallelism is not None and state.max_parallelism != given:
            raise ValueError(
                f"max_parallelism ({given}) and StateConfig(max_parallelism={state.max_parallelism}) differ; give one")
        return given
    return state.max_parallelism if state.max_parallelism is not None else DEFAULT_MAX_PARALLELISM


def _check_within_max(parallelism: int, max_parallelism: int) -> None:
    if parallelism > max_parallelism:
        raise ValueError(
            f"parallelism must be at most max_parallelism ({max_parallelism}), the number of key groups; "
            f"got {parallelism}"
        )
