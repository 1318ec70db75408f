"""One execution of a compiled job: where it starts from (decided and checked on the driver,
before Spark starts, so a wrong checkpoint is a one-line refusal, not a failed stage), which host
runs it, and who is told of it (a launcher's callbacks, the control endpoint)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..errors import EpochalError
from ..plan.blueprint import JobBlueprint
from ..plan.job_graph import JobGraph
from ..runtime.master.control import JobControl, JobState, JobStatus
from ..runtime.master.start_checks import AUTO, auto_start, describe_auto_start
from ..runtime.result import JobProgress, JobResult
from ..validation import check_bool, check_int, check_name
from .handle import JobHandle
from .overrides import Executor, RunOverrides

if TYPE_CHECKING:
    from ..cluster.endpoint import ControlEndpoint


@dataclass(frozen=True, slots=True)
class Host:
    """Where a job runs: every task in this process (tests, debugging), or on Spark."""

    executor: Executor
    seed: int  # the in-process scheduler's interleaving of tasks
    spark: Any  # the SparkSession, or None for a new `local[*]` one

    def create(self, progress: Callable[[JobProgress], None] | None) -> Any:
        if self.executor == "inprocess":
            from ..cluster.inprocess import InProcessExecutor

            return InProcessExecutor(seed=self.seed, progress=progress)
        from ..cluster.spark import SparkExecutor

        return SparkExecutor(self.spark, progress=progress)


@dataclass(frozen=True, slots=True)
class WebAddress:
    """Where the job's control endpoint listens (`port` 0 picks a free one)."""

    host: str
    port: int


class Launch:
    """A job compiled from `blueprint`, its start decided, ready to run once."""

    def __init__(
        self,
        blueprint: JobBlueprint,
        parallelism: int,
        from_checkpoint: str | int | None,
        allow_non_restored_state: bool,
        host: Host,
        web: WebAddress | None,
        overrides: RunOverrides | None,
    ) -> None:
        if from_checkpoint is not None:
            _check_which_checkpoint(from_checkpoint)
        check_bool("allow_non_restored_state", allow_non_restored_state)
        self.blueprint, self.host, self.web = blueprint, host, web
        self.job = blueprint.compile(parallelism)
        self.progress: Callable[[JobProgress], None] | None = None
        self.on_result: Callable[[JobResult], None] | None = None
        if overrides is not None:
            self.progress, self.on_result = overrides.progress, overrides.on_result
            if overrides.from_checkpoint is not None:
                from_checkpoint = overrides.from_checkpoint
            allow_non_restored_state = allow_non_restored_state or overrides.allow_non_restored_state
        self.start = _decide_start(self.job, from_checkpoint, allow_non_restored_state)
        self.control = JobControl(self.job.name, self.job.parallelism)

    def run(self) -> JobResult:
        """Run the job to its end on a new host (a rescale by restore relaunches it)."""
        from ..cluster.launcher import run_job

        result = run_job(lambda: self.host.create(self.progress), self.blueprint, self.job, self.start, self.control)
        if self.on_result is not None:
            self.on_result(result)
        return result

    def run_serving(self) -> JobResult:
        """`run()`, with the control endpoint served while it runs."""
        endpoint = self._serve()
        try:
            return self.run()
        finally:
            if endpoint is not None:
                endpoint.close()

    def in_background(self) -> JobHandle:
        """`run_serving()` on a thread of this process; its handle at once."""
        endpoint = self._serve()

        def run_then_close() -> JobResult:
            try:
                return self.run()
            finally:
                if endpoint is not None:
                    endpoint.close()

        return JobHandle(self.control, run_then_close, endpoint.url if endpoint else None,
                         endpoint.token if endpoint else None)

    def _serve(self) -> ControlEndpoint | None:
        if self.web is None:
            return None
        from ..cluster.endpoint import ControlEndpoint

        endpoint = ControlEndpoint(self.control, self.web.host, self.web.port)
        announced: list[bool] = []

        def announce(status: JobStatus) -> None:
            """Once the start checks passed: asked for, so shown whatever the logging setup."""
            if status.state is JobState.RUNNING and not announced:
                announced.append(True)
                print(f"epochal: job {status.job!r} at {endpoint.url} (token for actions: {endpoint.token})",
                      file=sys.stderr, flush=True)

        self.control.watch(announce)
        return endpoint


def _decide_start(job: JobGraph, which: str | int | None, allow_non_restored_state: bool) -> str | int | None:
    """The checkpoint `job` starts from (None: a fresh start), its state checked against the job."""
    if which is None and job.config.checkpoint.resume == AUTO:
        which = AUTO  # CheckpointConfig(resume="auto"): no flag needed
    if which == AUTO:
        which = _decide_auto_start(job)
    if which is not None:
        _check_restored_state(job, which, allow_non_restored_state)
    return which


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
