"""A program as recorded, ready to compile at any parallelism: what a rescale recompiles.

The API records a logical graph; a host that rescales by restore needs the same program at
another parallelism (dissertation §4.2: state is matched to operators by uid, so the program
is the same, only its subtasks change). The blueprint is that program, with its configuration,
as plan data: the relaunch (`cluster.launcher`) compiles it without reaching back into `api`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from ..config import JobConfig
from .compiler import compile_job
from .job_graph import JobGraph
from .logical import LogicalGraph


@dataclass(frozen=True, slots=True)
class JobBlueprint:
    """A named program with its configuration; `compile` makes its job graph at a parallelism."""

    graph: LogicalGraph
    name: str
    max_parallelism: int
    config: JobConfig
    dead_letter: Any = None  # the job's dead-letter sink, if any

    def compile(self, parallelism: int, max_workers: int | None = None) -> JobGraph:
        """The job graph at `parallelism`, launching `max_workers` subtasks where some stand by
        (the blueprint's own when None)."""
        config = self.config if max_workers is None else dataclasses.replace(self.config, max_workers=max_workers)
        return compile_job(self.graph, self.name, parallelism, self.max_parallelism, config, self.dead_letter)
