"""The job master's side of source splits handed over in a live rescale.

`runtime.splits` describes the protocol and holds a source subtask's side. Here the job
master tells the subtasks that gained splits at a rerouting checkpoint that it completed
(`AdoptSplits`, right after the key groups' `AdoptKeyGroups` and ahead of any later trigger), and
decides when such sources end.

Ending: a source whose splits can move does not end when it has read its own, since a rescale
may still hand it more; a standby subtask has none to start with. Its subtasks end when the job
master tells them no split will come (`NoMoreSplits`): once a complete checkpoint shows every
subtask of the vertex with nothing left to read and nothing on its way (`SourcePositions.
exhausted`). Every split has exactly one owner in every checkpoint, so then every split was read
to its end: a rescale after that moves only finished splits, and the ended subtasks keep theirs
(the restore takes the union of positions, so it reads nothing again). Hence such sources need
periodic checkpoints (`migration.handover_sources`), and a bounded job ends up to one interval
after its data. Sources that cannot hand over (no periodic checkpoints, loops, unaligned
checkpoints) are told at once, by the enumerator (`runtime.master.enumerator`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from ...plan.job_graph import JobGraph, TaskId
from ...state.keygroups import RoutingTable
from ...state.manifest import Manifest
from ...state.snapshot_files import decode_operator_state
from ...state.storage import CheckpointStorage
from ..routing import handover_sources
from ..splits import discovery_interval
from ..wire.messages import AdoptSplits, NoMoreSplits

log = logging.getLogger(__name__)

Send = Callable[[TaskId, object], None]


class SplitHandovers:
    """Source splits in live rescales, on the job master: who adopts, and when sources end."""

    def __init__(self, job: JobGraph, has_storage: bool) -> None:
        self.job = job
        self.vertices = handover_sources(job, has_storage)
        # bounded ones: they end when told (sources that find splits as they run never end)
        self.ending = frozenset(v for v in self.vertices if discovery_interval(_source(job, v)) is None)
        self.told: set[int] = set()  # vertices told NoMoreSplits in this attempt
        self._storage: CheckpointStorage | None = None

    def gainers(self, current: RoutingTable, table: RoutingTable) -> frozenset[TaskId]:
        """The source subtasks that may gain splits when the readers go from `current`'s active
        subtasks to `table`'s (each checks whether it did)."""
        if current.active == table.active:
            return frozenset()
        return frozenset(TaskId(v, s) for v in self.vertices - self.told
                         if self.job.vertex(v).parallelism == table.parallelism for s in range(table.active))

    def adopt(self, tasks: frozenset[TaskId], manifest: Manifest, send: Send) -> None:
        """The rerouting checkpoint `manifest` completed: its gaining sources read their splits."""
        adopt = AdoptSplits(manifest)
        for task in sorted(tasks, key=lambda t: (t.vertex, t.subtask)):
            send(task, adopt)

    def completed(self, manifest: Manifest, send: Send) -> None:
        """A checkpoint completed: end the sources it shows read to the end."""
        for vertex in sorted(self.ending - self.told):
            if self._all_read(vertex, manifest):
                log.info("job %r: every split of vertex %d read at checkpoint %d; its sources end", self.job.name,
                         vertex, manifest.checkpoint_id)
                self.told.add(vertex)
                message = NoMoreSplits(_source_uid(self.job, vertex))
                for subtask in range(self.job.vertex(vertex).parallelism):
                    send(TaskId(vertex, subtask), message)

    def abandon(self) -> None:
        """The attempt ended: the next one's sources are told again."""
        self.told.clear()

    def _all_read(self, vertex: int, manifest: Manifest) -> bool:
        op = manifest.operator(_source_uid(self.job, vertex))
        if op is None or len(op.subtasks) != self.job.vertex(vertex).parallelism:
            return False
        storage = self._reader()
        for st in op.subtasks:  # the first subtask still reading ends the look (subtask 0 reads)
            if st.operator is None:
                return False
            state = decode_operator_state(storage.read_file(st.operator), source=st.operator.label)
            if not getattr(state, "exhausted", False):
                return False
        return True

    def _reader(self) -> CheckpointStorage:
        if self._storage is None:
            config = self.job.config.checkpoint
            assert config.directory is not None  # handover_sources: sources hand over only with one
            self._storage = CheckpointStorage(config.directory, create=False, filesystem=config.filesystem)
        return self._storage


def _source(job: JobGraph, vertex: int) -> object:
    return getattr(job.vertex(vertex).chain[0], "source", None)


def _source_uid(job: JobGraph, vertex: int) -> str:
    return job.vertex(vertex).chain[0].uid
