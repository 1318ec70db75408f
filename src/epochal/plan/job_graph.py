"""The job graph: what the runtime executes.

Vertices are chains of operators that run in one task per subtask; edges say how records are
partitioned between vertices. Built by `plan.compiler` from the API's logical graph; the runtime
sees only this, never an API object.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..config import JobConfig
from .specs import OperatorSpec, Partitioning, PartitionKind, SourceSpec


@dataclass(frozen=True, slots=True)
class JobVertex:
    """A chain of operators run by `parallelism` tasks."""

    id: int
    chain: tuple[OperatorSpec, ...]
    parallelism: int
    # subtasks that start with work (splits, key groups); the rest stand by for a live rescale
    # (`StreamEnvironment(max_workers=...)`); None: all of them
    active: int | None = None

    @property
    def active_parallelism(self) -> int:
        return self.parallelism if self.active is None else self.active

    @property
    def name(self) -> str:
        return " -> ".join(op.name for op in self.chain)

    @property
    def is_source(self) -> bool:
        return isinstance(self.chain[0], SourceSpec)


@dataclass(frozen=True, slots=True)
class JobEdge:
    """Records from every subtask of `source` to the subtasks of `target`, partitioned."""

    source: int
    target: int
    partitioning: Partitioning
    is_back_edge: bool = False  # found by depth-first search: closes a loop (ABS §4.3)
    in_loop: bool = False  # both ends in the same loop (strongly connected component)
    input: int = 0  # the input of the target's first operator it feeds (1: a two-input operator's second)


@dataclass(frozen=True, slots=True)
class TaskId:
    """One subtask of one vertex: the unit the coordinator talks to."""

    vertex: int
    subtask: int

    def __str__(self) -> str:
        return f"v{self.vertex}[{self.subtask}]"


@dataclass(frozen=True, slots=True)
class JobGraph:
    """Vertices in topological order, their edges, and the job's configuration."""

    name: str
    vertices: tuple[JobVertex, ...]
    edges: tuple[JobEdge, ...]
    max_parallelism: int
    config: JobConfig

    def vertex(self, vertex_id: int) -> JobVertex:
        return self.vertices[vertex_id]

    def inputs_of(self, vertex_id: int) -> tuple[JobEdge, ...]:
        return tuple(e for e in self.edges if e.target == vertex_id)

    def outputs_of(self, vertex_id: int) -> tuple[JobEdge, ...]:
        return tuple(e for e in self.edges if e.source == vertex_id)

    @property
    def parallelism(self) -> int:
        """The job's parallelism, as a user set it: its widest vertex's active subtasks."""
        return max(v.active_parallelism for v in self.vertices)

    def keyed_vertices(self) -> frozenset[int]:
        """The vertices records reach by key group: whose keyed state a routing table places."""
        return frozenset(e.target for e in self.edges if e.partitioning.kind is PartitionKind.KEY_GROUP)

    def task_ids(self) -> list[TaskId]:
        return [TaskId(v.id, i) for v in self.vertices for i in range(v.parallelism)]

    def operator_uids(self) -> list[str]:
        return [op.uid for v in self.vertices for op in v.chain]

    def describe(self) -> str:
        """A readable listing of the graph, for `epochal` users and error messages."""
        lines = [f"job {self.name!r} (max parallelism {self.max_parallelism})"]
        for v in self.vertices:
            lines.append(f"  v{v.id} x{v.parallelism}: {v.name}")
            for e in self.outputs_of(v.id):
                two = any(x.input for x in self.inputs_of(e.target))  # a two-input operator: which input
                which = f" (input {e.input + 1})" if two else ""
                lines.append(f"      --{e.partitioning.kind.value}--> v{e.target}{which}")
        return "\n".join(lines)
