"""StreamEnvironment: where a stream program is built, and from where it is executed (about 450
lines, most of them the documentation of its arguments, which users read in their editors)."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Literal, TypeVar

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
from ..errors import EpochalError
from ..plan.blueprint import JobBlueprint
from ..plan.job_graph import JobGraph
from ..plan.logical import LogicalGraph
from ..plan.specs import SourceSpec
from ..runtime.master.control import JobControl, JobState, JobStatus
from ..runtime.master.start_checks import AUTO, auto_start, describe_auto_start
from ..runtime.result import JobProgress, JobResult
from ..state.keygroups import DEFAULT_MAX_PARALLELISM, MAX_KEY_GROUPS
from ..validation import (
    check_bool,
    check_callable,
    check_choice,
    check_gc_threshold,
    check_has_methods,
    check_instance,
    check_int,
    check_name,
    check_path,
    check_seconds,
)
from .builder import GraphBuilder
from .checks import OnErrorChoice, on_error_policy
from .connector import Sink, Source
from .handle import JobHandle
from .sql import SqlMethods
from .stream import DataStream
from .tables import resolve_table
from .time import WatermarkStrategy

if TYPE_CHECKING:
    from ..cluster.endpoint import ControlEndpoint

Executor = Literal["inprocess", "spark"]
EXECUTORS: tuple[Executor, ...] = ("inprocess", "spark")


T = TypeVar("T")  # a source's records


@dataclass(frozen=True, slots=True)
class RunOverrides:
    """Settings a launcher (`epochal run`) imposes on every environment a job file creates."""

    parallelism: int | None = None
    checkpoint_directory: str | None = None
    from_checkpoint: str | None = None
    progress: Callable[[JobProgress], None] | None = None
    executor: Executor | None = None
    allow_non_restored_state: bool = False
    web_port: int | None = None
    on_result: Callable[[JobResult], None] | None = None  # told of every job that finished
    spark: Any = None  # the SparkSession of environments that name none (`epochal serve`'s)

    def __post_init__(self) -> None:
        if self.parallelism is not None:
            check_int("parallelism", self.parallelism)
        if self.checkpoint_directory is not None:
            directory = check_path("checkpoint_directory", self.checkpoint_directory)
            object.__setattr__(self, "checkpoint_directory", directory)
        if self.from_checkpoint is not None:
            check_name("from_checkpoint", self.from_checkpoint)
        if self.progress is not None:
            check_callable("progress", self.progress)
        if self.executor is not None:
            check_choice("executor", self.executor, EXECUTORS)
        check_bool("allow_non_restored_state", self.allow_non_restored_state)
        if self.web_port is not None:
            check_int("web_port", self.web_port, minimum=0)
        if self.on_result is not None:
            check_callable("on_result", self.on_result)


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
        if _overrides is not None:
            if _overrides.parallelism is not None:
                self.parallelism = _overrides.parallelism
            if _overrides.executor is not None:
                self.executor = _overrides.executor
            if _overrides.checkpoint_directory is not None:
                self.checkpoint = replace(self.checkpoint, directory=_overrides.checkpoint_directory)
            if _overrides.web_port is not None:
                self.web_port = _overrides.web_port
            if _overrides.spark is not None and self.spark is None:
                self.spark = _overrides.spark

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
        return self._compile(name, self.parallelism)

    def _compile(self, name: str, parallelism: int) -> JobGraph:
        return self._blueprint(name).compile(parallelism)

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
        run, control = self._prepare(name, from_checkpoint, allow_non_restored_state)
        endpoint = self._serve(control)
        try:
            return run()
        finally:
            if endpoint is not None:
                endpoint.close()

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
        run, control = self._prepare(name, from_checkpoint, allow_non_restored_state)
        endpoint = self._serve(control)

        def run_then_close() -> JobResult:
            try:
                return run()
            finally:
                if endpoint is not None:
                    endpoint.close()

        return JobHandle(control, run_then_close, endpoint.url if endpoint else None,
                         endpoint.token if endpoint else None)

    def _prepare(
        self, name: str, from_checkpoint: str | int | None, allow_non_restored_state: bool
    ) -> tuple[Callable[[], JobResult], JobControl]:
        """Check the arguments and compile the job; the call that runs it, and its control."""
        if from_checkpoint is not None:
            _check_which_checkpoint(from_checkpoint)
        check_bool("allow_non_restored_state", allow_non_restored_state)
        job = self.job_graph(name)
        progress = on_result = None
        if _overrides is not None:
            progress, on_result = _overrides.progress, _overrides.on_result
            if _overrides.from_checkpoint is not None:
                from_checkpoint = _overrides.from_checkpoint
            allow_non_restored_state = allow_non_restored_state or _overrides.allow_non_restored_state
        if from_checkpoint is None and job.config.checkpoint.resume == AUTO:
            from_checkpoint = AUTO  # CheckpointConfig(resume="auto"): no flag needed
        if from_checkpoint == AUTO:
            from_checkpoint = _decide_auto_start(job)
        if from_checkpoint is not None:
            _check_restored_state(job, from_checkpoint, allow_non_restored_state)
        control = JobControl(job.name, job.parallelism)
        blueprint, start = self._blueprint(name), from_checkpoint

        def run() -> JobResult:
            from ..cluster.launcher import run_job

            result = run_job(lambda: self._host(progress), blueprint, job, start, control)
            if on_result is not None:
                on_result(result)
            return result

        return run, control

    def _host(self, progress: Callable[[JobProgress], None] | None) -> Any:
        """The executor that hosts the job: this process, or Spark."""
        if self.executor == "inprocess":
            from ..cluster.inprocess import InProcessExecutor

            return InProcessExecutor(seed=self.seed, progress=progress)
        from ..cluster.spark import SparkExecutor

        return SparkExecutor(self.spark, progress=progress)

    def _serve(self, control: JobControl) -> ControlEndpoint | None:
        if self.web_port is None:
            return None
        from ..cluster.endpoint import ControlEndpoint

        endpoint = ControlEndpoint(control, self.web_host, self.web_port)
        announced: list[bool] = []

        def announce(status: JobStatus) -> None:
            """Once the start checks passed: asked for, so shown whatever the logging setup."""
            if status.state is JobState.RUNNING and not announced:
                announced.append(True)
                print(f"epochal: job {status.job!r} at {endpoint.url} (token for actions: {endpoint.token})",
                      file=sys.stderr, flush=True)

        control.watch(announce)
        return endpoint


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


def _check_which_checkpoint(which: object) -> None:
    """`from_checkpoint`: "auto", "latest", a checkpoint id, or a path."""
    if isinstance(which, str):
        check_name("from_checkpoint", which)
    elif isinstance(which, int) and not isinstance(which, bool):
        check_int("from_checkpoint", which, minimum=0)
    else:
        raise TypeError(
            f"from_checkpoint must be 'auto', 'latest', a checkpoint id (int) or a path (str), got {which!r} "
            f"({type(which).__name__})"
        )


def _decide_auto_start(job: JobGraph) -> str | None:
    """`from_checkpoint="auto"`, decided once, on the driver, before Spark starts: `"latest"`
    when there is a complete checkpoint (the job master restores the newest that verifies, and
    says so if it had to pass over a corrupt one), or None (a fresh start, with every
    fresh-start check). The line saying which is printed whatever the logging setup: after a
    supervisor restarted the driver, it is how the driver's log tells a resume from a first
    start."""
    start = auto_start(job)
    print(f"epochal: {describe_auto_start(job, start)}", file=sys.stderr, flush=True)
    return None if start is None else "latest"


def _check_restored_state(job: JobGraph, which: str | int, allow_non_restored_state: bool) -> None:
    """Fail before starting if the checkpoint holds state that no operator of `job` claims."""
    from ..runtime.master.start_checks import check_restored_operators
    from ..state.savepoints import load_savepoint
    from ..state.storage import CheckpointStorage

    directory = job.config.checkpoint.directory
    manifest = None
    if isinstance(which, str) and which != "latest" and not which.isdigit():
        manifest = load_savepoint(which, verify=False)
    if manifest is None:
        if directory is None:
            return  # the executor reports the missing directory
        try:
            storage = CheckpointStorage(directory, create=False)
            manifest = storage.resolve(which, verify=False)
        except EpochalError:
            return  # the executor reports it, with its own rules
    uids = [spec.uid for vertex in job.vertices for spec in vertex.chain]
    check_restored_operators(manifest, uids, allow_non_restored_state)
