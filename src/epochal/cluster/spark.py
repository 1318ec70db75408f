"""The Spark host: a job runs as one barrier-mode stage of N long-running tasks.

Spark gang-schedules the N tasks (one Epochal worker each, `cluster.worker`); they find each
other through the job master, which hands every worker the others' addresses once all said hello
(`cluster.protocol.Peers`), and then talk over their own TCP links. The process that holds the
SparkSession hosts the job master (`runtime.master.job_master`, shared with the in-process
executor) and the workers' control links: the driver of a
classic session, the client of a Spark Connect session. Workers connect back to it, so under
Connect the executors must be able to reach the client (true for `local[*]` and for clients
inside the cluster's network); one that cannot fails the job at once, in one line.

On a Connect session, which has no RDDs, the stage is a DataFrame's `mapInArrow(...,
barrier=True)` over N one-row partitions, cancelled through a job tag (`interruptTag`); on a
classic session it stays an RDD's `barrier().mapPartitions`, cancelled through its job group:
the same worker function, and the RDD stage starts about 40 ms sooner (measured, interleaved:
submit → running 1.06 s against 1.09 s; relaunch recovery 2.7 s against 2.8 s, within noise).

Every link is authenticated (`runtime.wire.handshake`): the host makes the job's secret and hands
it to the workers in the stage's task closure; its port (`cluster.master_port`) turns a
connection into a worker's link only once it passed the handshake. The job master is built, and
runs its start checks, before the SparkSession is (`cluster.session`), so a job that cannot start
fails before the JVM does. Where the rest lives: launching the stage, supervising it and
relaunching it (`cluster.stage_host`), what a stage's task runs and the reading of its failures
(`cluster.stage_task`), the session, its master, task slots and the address workers reach
(`cluster.session`), the worker (`cluster.worker`), the wire protocol (`cluster.protocol`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from ..errors import EpochalError
from ..plan.job_graph import JobGraph
from ..runtime.clock import WallClock
from ..runtime.master.control import JobControl
from ..runtime.master.job_master import JobMaster
from ..runtime.result import JobProgress, JobResult
from .protocol import JobMasterUnreachable as JobMasterUnreachable  # re-exported: tests import it here
from .session import BIND_HOST_ENV as BIND_HOST_ENV  # re-exported: tests import it here
from .session import bind_host, default_session, master_of, wait_for_slots
from .session import create_session as create_session  # re-exported: tests and benchmarks import it here
from .stage_host import LaunchFailed as LaunchFailed
from .stage_host import StageHost
from .stage_host import WorkerLost as WorkerLost
from .stage_records import StageRecords

log = logging.getLogger(__name__)


def _spark_pickle(obj: Any) -> bytes:
    """`obj` pickled as the stage ships it to its workers (pyspark imported only when a check asks)."""
    from pyspark import cloudpickle

    data: bytes = cloudpickle.dumps(obj)
    return data



class SparkExecutor(StageRecords):
    """Runs a job graph on Spark: one barrier stage, a worker per task slot.

    Args:
        spark: the SparkSession to use, classic or Spark Connect; None creates (or reuses) the
            embedded local one.
        bind_host: the address the job master listens on for its workers; defaults to
            `EPOCHAL_BIND_HOST`, else `spark.driver.host` on a classic session, else (Connect)
            this machine's address on the route to the Connect server.
    """

    def __init__(
        self,
        spark: Any = None,
        bind_host: str | None = None,
        progress: Callable[[JobProgress], None] | None = None,
    ) -> None:
        super().__init__()  # the records: timeline, workers' pids, recoveries (`StageRecords`)
        self.spark = spark
        self.bind_host = bind_host
        self.progress = progress

    def execute(
        self, job: JobGraph, from_checkpoint: str | int | None = None, control: JobControl | None = None,
        recompile: Callable[[int], JobGraph] | None = None,
    ) -> JobResult:
        """Run `job` in one barrier stage to its end.

        `recompile(n)`: the job at parallelism `n`; given it, a rescale within the stage's workers
        (`JobConfig.max_workers`) happens in place: the tasks restart in the running stage from
        the rescale's checkpoint. Without it, or beyond them, the host leaves by `RescaleByRestore`.
        """
        workers = max(max(v.parallelism for v in job.vertices), job.config.max_workers or 0)
        # first the job master's start checks (sources, every operator pickles, sinks, checkpoints):
        # before Spark starts
        self.timeline.append(("execute", time.monotonic()))
        master = JobMaster(job, WallClock(), from_checkpoint, self.progress, control, ships=_spark_pickle)
        self.timeline.append(("checked", time.monotonic()))
        spark = self.spark or default_session(workers)
        self.timeline.append(("session", time.monotonic()))
        slots = wait_for_slots(spark, workers)
        if slots is None:
            log.warning("cannot tell the task slots of %s; Spark checks them when the stage starts", master_of(spark))
        elif workers > slots:
            raise EpochalError(
                f"job {job.name!r} needs {workers} task slots for its workers but the cluster "
                f"({master_of(spark)}) has {slots}; lower the parallelism or add executors/cores"
            )
        master.control.task_slots = slots  # a rescale beyond them is refused, not launched
        host = self.bind_host or bind_host(spark)
        return StageHost(master, spark, workers, host, self, recompile).run()

