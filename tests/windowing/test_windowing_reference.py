"""The windowing core against a brute-force reference, over random window specs and traces.

Random specs: tumbling and sliding windows (sizes not multiples of slides, offsets, sampling gaps,
edges that are not binary fractions), sessions, user-defined windows (count windows, punctuation,
price regimes), several at once; random aggregates and allowed lateness. Random traces: bounded
delays with a share of records far past the watermark, watermarks at random points, random batch
boundaries for the columnar path.
"""

from __future__ import annotations

from collections import Counter

from hypothesis import HealthCheck, given, settings
from scenarios import (
    Mark,
    Rec,
    Scenario,
    canonical,
    describe,
    run_columns,
    run_records,
    run_reference,
    scenarios,
)

from epochal.plan.windows import Session, Tumbling

SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(scenarios())
def test_results_equal_the_reference(scenario: Scenario) -> None:
    assert canonical(run_records(scenario)) == canonical(run_reference(scenario)), describe(scenario)


@SETTINGS
@given(scenarios())
def test_the_columnar_path_equals_the_per_record_path(scenario: Scenario) -> None:
    assert canonical(run_columns(scenario)) == canonical(run_records(scenario)), describe(scenario)


@settings(max_examples=100, deadline=None)
@given(scenarios())
def test_firing_every_store_at_every_watermark_changes_nothing(scenario: Scenario) -> None:
    """Firing only the stores whose next fire time is due loses nothing (the timer contract), and
    stores pickled and restored at every watermark carry on exactly."""
    expected = canonical(run_records(scenario))
    assert canonical(run_records(scenario, fire_all=True)) == expected, describe(scenario)
    assert canonical(run_records(scenario, pickle_stores=True)) == expected, describe(scenario)


@settings(max_examples=30, deadline=None)
@given(scenarios(many_periodic=True, max_records=30))
def test_many_periodic_queries_equal_the_reference(scenario: Scenario) -> None:
    """More than a dozen queries: slice edges and window ends are computed in numpy."""
    assert canonical(run_records(scenario)) == canonical(run_reference(scenario)), describe(scenario)
    assert canonical(run_columns(scenario, arrow_keys=False)) == canonical(run_records(scenario))


@SETTINGS
@given(scenarios())
def test_every_record_is_counted_once_or_reported_late(scenario: Scenario) -> None:
    """For queries whose windows partition time (tumbling, sessions), the final counts plus the
    records reported late for that query add up to the number of records."""
    scenario = Scenario({"t": Tumbling(1.5), "s": Session(1.0)}, "count", scenario.lateness,
                        scenario.events, scenario.cuts)
    emitted, late = run_records(scenario)
    records = sum(isinstance(e, Rec) for e in scenario.events)
    late_per_query = Counter(q for _, q in late)
    final: dict[tuple[str, str, float, float], int] = {}
    for event in emitted:
        for key, query, start, end, result, _ in event:
            final[(key, query, start, end)] = result  # the last result of a window counts
    tumbling = sum(v for (_, q, _, _), v in final.items() if q == "t")
    assert tumbling + late_per_query["t"] == records
    sessions = [(k, s, e, v) for (k, q, s, e), v in final.items() if q == "s"]
    maximal = [v for k, s, e, v in sessions
               if not any(k2 == k and s2 <= s and e <= e2 and (s2, e2) != (s, e) for k2, s2, e2, _ in sessions)]
    assert sum(maximal) + late_per_query["s"] == records
    assert isinstance(scenario.events[-1], Mark)
