"""The whole job's record counts across restores (`runtime.master.job_counts`): a resumed job, a
rescaled one and one whose survivors ran on while a lost worker's tasks restored count every
record once, as a run without the failure would."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from epochal import StreamEnvironment
from epochal.runtime.master.job_counts import base_of, checkpoint_counts, less, survivors_base, whole_job
from epochal.runtime.wire.messages import OperatorMetrics
from epochal.state.manifest import Manifest
from epochal.testing import CollectSink, ListSource


def _job() -> Any:
    env = StreamEnvironment(parallelism=2, executor="inprocess")
    env.from_source(ListSource([1]), name="src").map(lambda x: x, name="m").sink_to(CollectSink(), name="out")
    return env.job_graph("counts")


def _m(n: int) -> tuple[OperatorMetrics, ...]:
    """A task's counts after `n` records: n out of the source, into and out of m, into the sink."""
    return (OperatorMetrics("src", 0, n), OperatorMetrics("m", n, n), OperatorMetrics("out", n, 0))


def _manifest(job: Any, checkpoint_id: int, counts: Any) -> Manifest:
    return Manifest(checkpoint_id, job.name, 0.0, 0.0, (), counts=counts)


def _total(job: Any, metrics: tuple[OperatorMetrics, ...]) -> int:
    return next(m.records_out for m in metrics if m.name == "src")


@given(st.integers(0, 50), st.integers(0, 50), st.integers(0, 50), st.integers(0, 50), st.integers(0, 50),
       st.integers(0, 50))
def test_survivors_and_restored_tasks_count_every_record_once(
    a0: int, b0: int, a1: int, b1: int, lost_after: int, a2: int
) -> None:
    """Tasks A and B count from checkpoint R (their attempt's start). At checkpoint C, A had
    counted a0 + a1 and B b0 + b1; B's worker dies having counted `lost_after` more (replayed),
    restores C and counts b2 = lost_after + a2 more while A, a survivor, counts a2 more."""
    job = _job()
    r = _manifest(job, 1, checkpoint_counts(job, {}, [_m(100), _m(200)]))  # the run before R
    base_r = base_of(r)
    c = _manifest(job, 2, checkpoint_counts(job, base_r, [_m(a0 + a1), _m(b0 + b1)]))
    base = survivors_base(job, base_of(c), [_m(a0 + a1)])  # A survived: its counts at C are subtracted
    assert base is not None
    b2 = lost_after + a2
    counted = tuple(OperatorMetrics(x.name, x.records_in + y.records_in, x.records_out + y.records_out)
                    for x, y in zip(_m(a0 + a1 + a2), _m(b2), strict=True))  # A since R, B since C
    whole = whole_job(job, base, counted)
    assert _total(job, whole) == 300 + a0 + a1 + b0 + b1 + a2 + b2
    since = less(job, whole, base_of(c))
    assert _total(job, since) == a2 + b2  # of which since C
    # without the survivors' correction A's records before C would count twice
    assert _total(job, whole_job(job, base_of(c), counted)) == _total(job, whole) + a0 + a1


def test_a_checkpoint_without_counts_makes_them_unknown() -> None:
    job = _job()
    old = _manifest(job, 3, None)  # written by an older version
    assert base_of(old) is None and survivors_base(job, None, [_m(1)]) is None
    assert checkpoint_counts(job, None, [_m(1)]) is None
    assert whole_job(job, None, _m(4)) == _m(4)
