"""Record counts of the whole job, carried across restores in its checkpoints.

A task counts the records of its operators since its attempt began; a restored attempt begins
at a checkpoint, so on its own it would report only what came after it (a resumed job that
read 120,000 records would say 88,000). Every checkpoint therefore carries, per operator uid,
what the whole job had processed when it was taken (`Manifest.counts`): the counts it was
restored from plus what each task had counted when it fixed its state for the checkpoint
(the task's counts ride on its acknowledgement). The barrier cuts the stream where the state
is cut (ABS §4.2), so with exactly-once checkpoints every record is counted once: before the
barrier in the checkpoint's counts, after it in the counts of the attempt that restores it.
(Unaligned checkpoints too: records in flight were counted out of the upstream task and are
counted into the downstream one when they are replayed. At-least-once checkpoints replay some
records, and count them again.)

With survivors (`master.survivors`), only a lost worker's tasks restore a checkpoint C; the
others count on from their attempt's start. The attempt then counts on from C's counts less what
the survivors had counted at C (`survivors_base`), so C's counts plus every task's records
since C make the whole job's again.

Pure functions: the coordinator folds acknowledgements into a manifest's counts, the job
master folds an attempt's final counts onto the counts it restored.
"""

from __future__ import annotations

from collections.abc import Iterable

from ...plan.job_graph import JobGraph
from ...plan.specs import SinkSpec, SourceSpec
from ...state.manifest import Manifest, OperatorCounts
from ..wire.messages import OperatorMetrics

Base = dict[str, OperatorCounts] | None  # by uid; None: unknown (restored from a checkpoint without counts)


def base_of(manifest: Manifest | None) -> Base:
    """What an attempt restoring `manifest` counts on from (nothing for a fresh start)."""
    if manifest is None:
        return {}
    if manifest.counts is None:
        return None
    return {c.uid: c for c in manifest.counts}


def _uids(job: JobGraph) -> dict[str, str]:
    return {op.name: op.uid for vertex in job.vertices for op in vertex.chain}


def checkpoint_counts(
    job: JobGraph, base: Base, per_task: Iterable[tuple[OperatorMetrics, ...]]
) -> tuple[OperatorCounts, ...] | None:
    """The whole job's counts at a checkpoint: `base` plus each task's counts at its snapshot."""
    if base is None:
        return None
    uids = _uids(job)
    totals = {uid: [0, 0, 0, 0] for uid in uids.values()}
    for uid, c in base.items():
        if uid in totals:
            totals[uid] = [c.records_in, c.records_out, c.late_records, c.skipped_records]
    for counts in per_task:
        for m in counts:
            t = totals.get(uids.get(m.name, ""))
            if t is not None:
                t[0] += m.records_in
                t[1] += m.records_out
                t[2] += m.late_records
                t[3] += m.skipped_records
    return tuple(OperatorCounts(uid, *t) for uid, t in totals.items())


def survivors_base(
    job: JobGraph, restored: Base, survivors_at: Iterable[tuple[OperatorMetrics, ...]]
) -> Base:
    """What an attempt counts on from once its lost tasks restored a checkpoint whose counts are
    `restored`: those, less the survivors' counts at that checkpoint (`survivors_at`: they count
    since the attempt began, and go on counting)."""
    if restored is None:
        return None
    uids = _uids(job)
    totals = {uid: [c.records_in, c.records_out, c.late_records, c.skipped_records] for uid, c in restored.items()}
    for counts in survivors_at:
        for m in counts:
            t = totals.get(uids.get(m.name, ""))
            if t is not None:
                t[0] -= m.records_in
                t[1] -= m.records_out
                t[2] -= m.late_records
                t[3] -= m.skipped_records
    return {uid: OperatorCounts(uid, *t) for uid, t in totals.items()}


def less(job: JobGraph, whole: tuple[OperatorMetrics, ...], base: Base) -> tuple[OperatorMetrics, ...]:
    """The whole job's counts less a checkpoint's (`base`): the records since that checkpoint."""
    if not base:
        return whole
    uids = _uids(job)
    out = []
    for m in whole:
        b = base.get(uids.get(m.name, ""))
        out.append(m if b is None else OperatorMetrics(
            m.name, m.records_in - b.records_in, m.records_out - b.records_out,
            m.late_records - b.late_records, m.skipped_records - b.skipped_records))
    return tuple(out)


def whole_job(job: JobGraph, base: Base, since: tuple[OperatorMetrics, ...]) -> tuple[OperatorMetrics, ...]:
    """An attempt's counts (`since` its restored checkpoint) plus what that checkpoint carried."""
    if not base:
        return since
    uids = _uids(job)
    out = []
    for m in since:
        b = base.get(uids.get(m.name, ""))
        if b is None:
            out.append(m)
        else:
            out.append(OperatorMetrics(m.name, m.records_in + b.records_in, m.records_out + b.records_out,
                                       m.late_records + b.late_records, m.skipped_records + b.skipped_records))
    return tuple(out)


def job_totals(job: JobGraph, base: Base) -> tuple[int, int]:
    """Records out of the sources and into the sinks that `base` holds (the job's in and out)."""
    if not base:
        return 0, 0
    sources = {op.uid for vertex in job.vertices for op in vertex.chain if isinstance(op, SourceSpec)}
    sinks = {op.uid for vertex in job.vertices for op in vertex.chain if isinstance(op, SinkSpec)}
    return (sum(c.records_out for uid, c in base.items() if uid in sources),
            sum(c.records_in for uid, c in base.items() if uid in sinks))


def endpoints(job: JobGraph) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The names of the job's source and sink operators."""
    specs = [op for vertex in job.vertices for op in vertex.chain]
    return (tuple(op.name for op in specs if isinstance(op, SourceSpec)),
            tuple(op.name for op in specs if isinstance(op, SinkSpec)))
