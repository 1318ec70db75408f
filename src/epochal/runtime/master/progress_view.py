"""The live view of a job that progress displays show (`JobProgress`), from a metrics snapshot.

Counts are the whole job's: the tasks count since the checkpoint their attempt restored, so
what that checkpoint carried is added (`job_counts`), and a resumed job's progress goes on
from where it was instead of from zero.
"""

from __future__ import annotations

import math

from ...plan.job_graph import JobGraph
from ..metrics import JobMetrics
from ..result import CheckpointSummary, JobProgress
from .job_counts import Base, job_totals


def progress_view(
    job: JobGraph, metrics: JobMetrics, base: Base, checkpoints: list[CheckpointSummary],
    restarts: int, state: str, web_url: str | None,
) -> JobProgress:
    """What a display shows of `metrics`, the job in `state`; `base`: what the attempt counts on
    from (`job_counts`)."""
    newest = checkpoints[-1] if checkpoints else None
    lags = [op.watermark_lag_s for op in metrics.operators if op.watermark_lag_s is not None]
    marks = [op.watermark for op in metrics.operators if math.isfinite(op.watermark)]
    before_in, before_out = job_totals(job, base)
    return JobProgress(
        before_in + metrics.records_in, before_out + metrics.records_out, len(checkpoints),
        newest.duration_ms if newest else None, restarts, metrics.in_rate,
        max(lags) if lags else None, min(marks) if marks else None,
        newest.checkpoint_id if newest else None, job.name, state, web_url,
    )
