"""Channel state in a checkpoint: where a vertex's in-flight logs are stored, and where they restore.

A snapshot that logs in-flight data (a loop head's back edges, ABS §4.3, Algorithm 2, and an
unaligned checkpoint's inputs: `task.in_flight`) stores the log under a uid of its own. Both
wings read that layout: the coordinator records it, the job master refuses a restore at another
parallelism before any task starts, and a task replays its log.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import CheckpointError
from ..plan.job_graph import JobGraph, JobVertex
from ..state.manifest import Manifest, OperatorState
from .wire.elements import Element

IN_FLIGHT = "#in-flight"  # the suffix of the uid under which a vertex's in-flight logs are stored


def in_flight_uid(vertex: JobVertex) -> str:
    """The uid under which the manifest holds the in-flight logs of `vertex`'s subtasks."""
    return vertex.chain[0].uid + IN_FLIGHT


@dataclass(frozen=True, slots=True)
class InFlight:
    """One subtask's in-flight log of an unaligned checkpoint: (input, element) in arrival order."""

    elements: tuple[tuple[int, Element], ...]


def taken_elsewhere(op: OperatorState, vertex: JobVertex) -> bool:
    """`op` holds in-flight data of `vertex` logged at another parallelism."""
    return op.parallelism != vertex.parallelism and any(st.operator is not None for st in op.subtasks)


def check_in_flight(manifest: Manifest, job: JobGraph) -> None:
    """Refuse to restore in-flight logs at another parallelism than they were taken at."""
    for vertex in job.vertices:
        op = manifest.operator(in_flight_uid(vertex))
        if op is not None and taken_elsewhere(op, vertex):
            raise CheckpointError(
                f"checkpoint {manifest.checkpoint_id} is unaligned: it holds data in flight to "
                f"{vertex.name!r} at parallelism {op.parallelism}, which cannot be restored at "
                f"parallelism {vertex.parallelism}; rescale from a savepoint or an aligned checkpoint"
            )
