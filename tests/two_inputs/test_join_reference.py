"""The join operators against brute-force references, over random runs (`join_scenarios`).

Random interleavings of both inputs, random batch boundaries, watermarks drawn independently of
the records (any record may be late, by any amount), checkpoints restored at random points into
1 to 4 subtasks (a rescale: key groups split anew), both state backends. Each join's results are
exactly the reference's, and every record too late to be joined is in its late side output:
nothing is lost, nothing is duplicated.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from join_scenarios import (
    KEY,
    Scenario,
    arrival_reference,
    describe,
    interval_reference,
    late_records,
    run,
    scenarios,
    temporal_reference,
    window_reference,
)
from operator_harness import Subtasks

from epochal.plan.time import EventTime
from epochal.plan.two_inputs import (
    LATE_TAGS,
    IntervalJoinSpec,
    JoinInput,
    JoinOutput,
    JoinType,
    TemporalJoinSpec,
    TemporalMode,
    WindowJoinSpec,
)
from epochal.plan.windows import Sliding, Tumbling

SETTINGS = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                           HealthCheck.function_scoped_fixture])
TIME = EventTime(field=1)
SIDES = (JoinInput(KEY, TIME), JoinInput(KEY, TIME))
KEYS = (KEY, KEY)


HOWS = st.sampled_from(["inner", "left", "semi"])


def _output(how: str) -> JoinOutput:
    return JoinOutput(JoinType(how))


@SETTINGS
@given(scenarios(), st.sampled_from([(-2.0, 1.5), (0.0, 0.0), (0.5, 3.0), (-1.0, -0.5)]),
       st.booleans(), st.booleans(), HOWS)
def test_interval_join_equals_the_reference(scenario: Scenario, bounds: tuple[float, float], lower_inclusive: bool,
                                            upper_inclusive: bool, how: str) -> None:
    lower, upper = bounds
    spec = IntervalJoinSpec("j", "j", *SIDES, lower, upper, lower_inclusive, upper_inclusive, _output(how),
                            side_outputs=LATE_TAGS)
    done = run(scenario, spec, KEYS)
    expected = interval_reference(scenario, lower, upper, lower_inclusive, upper_inclusive, how)
    assert Counter(done.output.results) == expected, describe(scenario)
    late_left, late_right = late_records(scenario)
    assert Counter(done.output.tagged[LATE_TAGS[0]]) == late_left
    assert Counter(done.output.tagged[LATE_TAGS[1]]) == late_right


WINDOWS = [Tumbling(2), Tumbling(1.5, offset=0.5), Sliding(3, 1), Sliding(2.5, 1), Sliding(1, 2)]


@SETTINGS
@given(scenarios(), st.sampled_from(WINDOWS), st.sampled_from([0.0, 0.0, 1.0, 2.5]), HOWS)
def test_window_join_equals_the_reference(scenario: Scenario, window: Tumbling | Sliding, lateness: float,
                                          how: str) -> None:
    if how != "inner":
        lateness = 0.0  # only an inner window join takes allowed lateness
    spec = WindowJoinSpec("j", "j", *SIDES, window, lateness, _output(how), side_outputs=LATE_TAGS)
    done = run(scenario, spec, KEYS)
    expected, late_left, late_right = window_reference(scenario, window, lateness, how)
    assert Counter(done.output.results) == expected, describe(scenario)
    assert Counter(done.output.tagged[LATE_TAGS[0]]) == late_left
    assert Counter(done.output.tagged[LATE_TAGS[1]]) == late_right


@SETTINGS
@given(scenarios(), HOWS)
def test_event_time_temporal_join_equals_the_reference(scenario: Scenario, how: str) -> None:
    spec = TemporalJoinSpec("j", "j", *SIDES, TemporalMode.EVENT_TIME, _output(how), side_outputs=LATE_TAGS)
    done = run(scenario, spec, KEYS)
    assert Counter(done.output.results) == temporal_reference(scenario, how), describe(scenario)
    late_left, late_right = late_records(scenario)
    assert Counter(done.output.tagged[LATE_TAGS[0]]) == late_left
    assert Counter(done.output.tagged[LATE_TAGS[1]]) == late_right


@SETTINGS
@given(scenarios(), HOWS)
def test_lookup_join_equals_the_reference(scenario: Scenario, how: str) -> None:
    spec = TemporalJoinSpec("j", "j", JoinInput(KEY, None), JoinInput(KEY, None), TemporalMode.ARRIVAL,
                            _output(how))
    done = run(scenario, spec, KEYS)
    assert Counter(done.output.results) == arrival_reference(scenario, how), describe(scenario)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                 HealthCheck.too_slow])
@given(scenarios(max_records=14), st.sampled_from(["interval", "window", "temporal"]))
def test_the_disk_backend_joins_as_the_memory_backend(tmp_path: Path, scenario: Scenario, kind: str) -> None:
    """RocksDB holds one value for write-back at a time: a join must finish changing a key's state
    before it touches the key's timers."""
    if kind == "interval":
        spec: object = IntervalJoinSpec("j", "j", *SIDES, -1.0, 2.0, output=_output("left"), side_outputs=LATE_TAGS)
    elif kind == "window":
        spec = WindowJoinSpec("j", "j", *SIDES, Sliding(3, 1), 1.0, side_outputs=LATE_TAGS)
    else:
        spec = TemporalJoinSpec("j", "j", *SIDES, output=_output("left"), side_outputs=LATE_TAGS)
    memory = run(scenario, spec, KEYS)
    disk = run(scenario, spec, KEYS, backend="disk", tmp=str(tmp_path))
    assert Counter(disk.output.results) == Counter(memory.output.results), describe(scenario)
    assert {t: Counter(v) for t, v in disk.output.tagged.items()} == {
        t: Counter(v) for t, v in memory.output.tagged.items()}


def test_late_records_nobody_reads_are_counted_not_emitted() -> None:
    scenario = Scenario([("WL", 5.0), ("WR", 5.0), ("L", [(0, 1.0, "l0")]), ("R", [(0, 6.0, "r0")])], 1,
                        [(0, 1.0, "l0")], [(0, 6.0, "r0")])
    spec = IntervalJoinSpec("j", "j", *SIDES, 0.0, 10.0)
    done = run(scenario, spec, KEYS)
    assert done.output.results == [] and not done.output.tagged
    assert sum(op.late_records for op in done.ops) == 1


@pytest.mark.parametrize("how", ["inner", "left"])
def test_an_interval_join_keeps_a_record_only_until_no_other_record_can_meet_it(how: str) -> None:
    """State is cleaned by the watermark: after it passes `l + upper` (left) and `r - lower`
    (right) nothing of the key is left, and a left outer join emits the unmatched left then."""
    spec = IntervalJoinSpec("j", "j", *SIDES, -1.0, 2.0, output=_output(how))
    subtasks = Subtasks(spec, KEYS, 1)
    subtasks.feed(0, [(0, 10.0, "l0")])
    subtasks.feed(1, [(0, 30.0, "r0")])
    subtasks.watermark(12.0)  # l0 + 2 = 12: a right record at 12 may still come
    op = subtasks.ops[0]
    assert op.backend.entries(0)["__interval_join__"].left_rows == [(0, 10.0, "l0")]
    subtasks.watermark(12.5)
    state = op.backend.entries(0)["__interval_join__"]
    assert state.left_rows == [] and state.right_rows == [(0, 30.0, "r0")]
    assert subtasks.output.results == ([((0, 10.0, "l0"), None)] if how == "left" else [])
    subtasks.watermark(31.5)  # r0 - lower = 31: a left record at 31 could still meet it at 31
    assert "__interval_join__" not in op.backend.entries(0)
