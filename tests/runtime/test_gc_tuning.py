"""The garbage-collector settings a host applies while it runs a job, and gives back after."""

from __future__ import annotations

import gc

import pytest

from epochal import StreamEnvironment
from epochal.runtime.gc_tuning import freeze_long_lived, tuned_gc
from epochal.testing import CollectSink, ListSource

_JOB_THRESHOLD = (12_345, 11, 13)


def test_the_thresholds_hold_inside_and_come_back_after_an_error() -> None:
    before = gc.get_threshold()
    with pytest.raises(RuntimeError), tuned_gc(_JOB_THRESHOLD):
        assert gc.get_threshold() == _JOB_THRESHOLD
        raise RuntimeError("the job failed")
    assert gc.get_threshold() == before


def test_none_changes_nothing() -> None:
    before = gc.get_threshold()
    with tuned_gc(None, freeze=True):
        assert gc.get_threshold() == before
        assert gc.get_freeze_count() == 0


def test_freeze_hides_what_was_alive_and_unfreezes_after() -> None:
    with tuned_gc(_JOB_THRESHOLD, freeze=True):
        assert gc.get_freeze_count() > 0
    assert gc.get_freeze_count() == 0


def test_long_lived_objects_join_the_frozen_ones_only_in_a_process_that_froze() -> None:
    state = [{"k": (i, str(i))} for i in range(1000)]  # tracked containers, alive from here on
    freeze_long_lived()  # the user's process (in-process executor): not ours to freeze
    assert gc.get_freeze_count() == 0
    with tuned_gc(_JOB_THRESHOLD, freeze=True):
        frozen = gc.get_freeze_count()
        gained = [{"k": (i, str(i))} for i in range(1000)]  # a key group read ahead
        freeze_long_lived()
        assert gc.get_count()[0] < 10  # nothing young left to scan (2,000 containers were)
        assert gc.get_freeze_count() >= frozen + len(gained)
    assert gc.get_freeze_count() == 0 and len(state) == len(gained)
    freeze_long_lived()  # the worker's job is over: nothing is frozen any more
    assert gc.get_freeze_count() == 0


def _threshold_seen(_record: object) -> tuple[int, int, int]:
    return gc.get_threshold()


def test_the_in_process_executor_runs_the_job_under_its_thresholds() -> None:
    before = gc.get_threshold()
    env = StreamEnvironment(parallelism=2, executor="inprocess", gc_threshold=_JOB_THRESHOLD)
    sink = CollectSink()
    env.from_source(ListSource(range(10), splits=2)).map(_threshold_seen).sink_to(sink)
    env.execute()
    assert sink.committed() == [_JOB_THRESHOLD] * 10
    assert gc.get_threshold() == before


def test_gc_threshold_none_runs_under_the_process_settings() -> None:
    before = gc.get_threshold()
    env = StreamEnvironment(parallelism=1, executor="inprocess", gc_threshold=None)
    sink = CollectSink()
    env.from_source(ListSource(range(3))).map(_threshold_seen).sink_to(sink)
    env.execute()
    assert sink.committed() == [before] * 3
