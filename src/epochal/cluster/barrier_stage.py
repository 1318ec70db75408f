"""One submitted barrier stage of a job on Spark: a task per worker, and the thread waiting for it.

On a Connect session, which has no RDDs, the stage is a DataFrame's `mapInArrow(...,
barrier=True)` over N one-row partitions, cancelled through a job tag (`interruptTag`); on a
classic session it stays an RDD's `barrier().mapPartitions`, cancelled through its job group
(`cancelJobGroup`), and starts about 40 ms sooner (no query to plan); the two are equally fast
otherwise. What each task runs: `cluster.stage_task`; who submits, supervises and relaunches
stages: `cluster.stage_host`.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

_STAGE_SCHEMA = "worker int"


@dataclass(slots=True)
class BarrierStage:
    """One submitted barrier stage (a *launch*), the thread waiting for it, and what it raised."""

    number: int
    tag: str
    spark: Any
    connect: bool
    thread: threading.Thread | None = None
    error: list[BaseException] = field(default_factory=list)

    @classmethod
    def submit(
        cls, spark: Any, connect: bool, workers: int, number: int, fn: Callable[[Iterator[Any]], Iterator[Any]],
        description: str,
    ) -> BarrierStage:
        """Launch `number`: a stage of `workers` tasks, each running `fn`, on a thread of its own."""
        from pyspark import InheritableThread

        stage = cls(number, f"epochal-{uuid.uuid4().hex[:8]}-{number}", spark, connect)

        def body() -> None:
            try:
                stage._run(fn, workers, description)
            except BaseException as exc:  # noqa: BLE001 - reported to the job master
                stage.error.append(exc)

        stage.thread = InheritableThread(target=body, daemon=True, session=spark)
        stage.thread.start()
        return stage

    @property
    def is_done(self) -> bool:
        assert self.thread is not None
        return not self.thread.is_alive()

    def _run(self, fn: Callable[[Iterator[Any]], Iterator[Any]], n: int, description: str) -> None:
        """The stage, cancellable by this launch's tag; returns when it ends."""
        if self.connect:
            self.spark.addTag(self.tag)  # this thread's operations (the thread ends with the stage)
            self.spark.range(0, n, 1, n).mapInArrow(fn, _STAGE_SCHEMA, barrier=True).collect()
        else:
            sc = self.spark.sparkContext
            sc.setJobGroup(self.tag, description, interruptOnCancel=True)
            sc.parallelize(range(n), n).barrier().mapPartitions(fn).collect()

    def cancel(self) -> None:
        if self.connect:
            self.spark.interruptTag(self.tag)
        else:
            self.spark.sparkContext.cancelJobGroup(self.tag)

    def join(self, timeout: float) -> None:
        assert self.thread is not None
        self.thread.join(timeout=timeout)
