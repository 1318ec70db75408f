"""Processing-time windows, count windows and triggers against brute-force references.

The operator runs on its own, on a virtual clock, fed random traces (hypothesis): batches of
records at clock instants, clock advances (its processing-time timers fire as a task would fire
them), watermarks, the end of the input. The references compute every window from its
definition: the records it holds, summed; no slices.
"""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from epochal.plan.specs import KeyedWindowSpec, WindowFunctionKind
from epochal.plan.time import EventTime
from epochal.plan.triggers import (
    CountTrigger,
    EventTimeTrigger,
    ProcessingTimeTrigger,
    WindowTime,
    count_window,
)
from epochal.plan.windows import Session, Sliding, Tumbling
from epochal.runtime.clock import VirtualClock
from epochal.runtime.operators import OperatorContext, create_operator
from epochal.state.keygroups import KeyGroupRange

KEYS = ("a", "b", "c")


def _operator(queries: Any, time: WindowTime, trigger: Any = None, event_time: bool = False) -> Any:
    spec = KeyedWindowSpec(
        "w", "w", "k", (("window", queries),), WindowFunctionKind.SUM,
        EventTime(field="t") if event_time else None, value="v", time=time, trigger=trigger,
    )
    op = create_operator(spec)
    clock = VirtualClock(100.0)
    op.open(OperatorContext(0, 1, 8, KeyGroupRange(0, 8), clock))
    op.restore(None, [])
    op.start([])
    return op, clock


def _rows(out: Any) -> list[tuple[Any, float, float, Any]]:
    return [tuple(r) for r in (out or [])]  # type: ignore[misc]


def _advance(op: Any, clock: VirtualClock, seconds: float, out: list[Any], seen_at: list[tuple[Any, float]]) -> None:
    """Let `seconds` pass, firing due timers at their instants as a task would."""
    end = clock.now() + seconds
    while (t := op.next_timer()) is not None and t <= end:
        clock.advance(max(0.0, t - clock.now()))
        for row in _rows(op.on_processing_time(clock.now())):
            out.append(row)
            seen_at.append((row, clock.now()))
    clock.advance(end - clock.now())


def _windows_of(spec: Any, ts: float) -> list[tuple[float, float]]:
    if isinstance(spec, (Tumbling, Sliding)):
        return spec.windows_containing(ts)
    raise AssertionError(spec)


def _sessions(times: list[tuple[float, int]], gap: float) -> list[tuple[float, float, int]]:
    """Sessions by definition: sorted records, a new session where the gap exceeds `gap`."""
    out: list[tuple[float, float, int]] = []
    for ts, v in sorted(times):
        if out and ts <= out[-1][1]:
            start, _, total = out[-1]
            out[-1] = (start, ts + gap, total + v)
        else:
            out.append((ts, ts + gap, v))
    return out


steps = st.lists(
    st.tuples(st.floats(0.0, 4.0).map(lambda x: round(x, 1)),  # seconds to let pass first
              st.lists(st.tuples(st.sampled_from(KEYS), st.integers(0, 9)), max_size=6)),
    min_size=1, max_size=25,
)
PERIODIC = st.one_of(
    st.integers(1, 5).map(lambda n: Tumbling(n)),
    st.tuples(st.integers(2, 6), st.integers(1, 3)).map(lambda p: Sliding(p[0], p[1])),
)


@settings(max_examples=60, deadline=None)
@given(steps, st.one_of(PERIODIC, st.integers(1, 3).map(lambda g: Session(g))))
def test_processing_time_windows_match_their_definition(trace: list[Any], window: Any) -> None:
    op, clock = _operator(window, WindowTime.PROCESSING)
    out: list[Any] = []
    seen_at: list[tuple[Any, float]] = []
    arrived: dict[str, list[tuple[float, int]]] = defaultdict(list)
    fired_sessions: set[tuple[Any, ...]] = set()  # a session fires when the clock passes its end,
    # and again as a new window if a record extends it after (one at its very end does)

    def sessions_due(now: float) -> list[tuple[Any, ...]]:
        due = [(k, s, e, total) for k, records in arrived.items()
               for s, e, total in _sessions(records, window.gap) if e <= now]
        new = [d for d in due if d not in fired_sessions]
        fired_sessions.update(new)
        return new

    expected: list[tuple[Any, ...]] = []
    for wait, batch in trace:
        _advance(op, clock, wait, out, seen_at)
        if isinstance(window, Session):
            expected += sessions_due(clock.now())
        if batch:
            for k, v in batch:
                arrived[k].append((clock.now(), v))
            out.extend(_rows(op.process([{"k": k, "v": v} for k, v in batch])))
    out.extend(_rows(op.end_input()))
    if isinstance(window, Session):
        expected += sessions_due(math.inf)
    for k, records in arrived.items():
        if isinstance(window, Session):
            continue
        sums: dict[tuple[float, float], int] = defaultdict(int)
        for ts, v in records:
            for w in _windows_of(window, ts):
                sums[w] += v
        expected += [(k, s, e, total) for (s, e), total in sums.items()]
    assert sorted(out) == sorted(expected)
    for (_, _, end, _), at in seen_at:  # fired by the clock: never before the window's end
        assert end <= at


@settings(max_examples=80, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(KEYS), st.integers(0, 9)), max_size=60),
       st.integers(1, 5), st.one_of(st.none(), st.integers(1, 5)), st.integers(1, 20))
def test_count_windows_match_flink_s_count_window(records: list[tuple[str, int]], size: int, slide: int | None,
                                                  batch: int) -> None:
    """A window of a key's last `size` records every `slide` records (fewer at the start), as
    Flink's countWindow(size, slide); an incomplete one at the end does not fire."""
    op, _ = _operator(count_window(size, slide), WindowTime.COUNT)
    out: list[Any] = []
    for i in range(0, len(records), batch):
        out.extend(_rows(op.process([{"k": k, "v": v} for k, v in records[i:i + batch]])))
    out.extend(_rows(op.end_input()))
    expected: list[tuple[str, int]] = []
    step = slide or size
    for key in KEYS:
        values = [v for k, v in records if k == key]
        for end in range(step, len(values) + 1, step):
            expected.append((key, sum(values[max(0, end - size):end])))
    assert sorted((k, total) for k, _, _, total in out) == sorted(expected)
    for _, start, end, _ in out:
        assert end - start == size and end % step == 0


events = st.lists(
    st.one_of(
        st.tuples(st.just("record"), st.sampled_from(KEYS), st.integers(0, 30), st.integers(0, 9)),
        st.tuples(st.just("watermark"), st.integers(0, 35)),
    ),
    max_size=50,
)


@settings(max_examples=80, deadline=None)
@given(events, PERIODIC, st.integers(1, 4), st.booleans())
def test_a_count_trigger_fires_every_n_records_of_a_window(trace: list[Any], window: Any, n: int,
                                                          purging: bool) -> None:
    if purging and not isinstance(window, Tumbling):
        purging = False  # purging takes one tumbling query
    trigger = CountTrigger(n).purging() if purging else CountTrigger(n)
    op, _ = _operator(window, WindowTime.EVENT, trigger, event_time=True)
    out: list[Any] = []
    watermark = -math.inf
    members: dict[tuple[str, float, float], list[int]] = defaultdict(list)
    since: dict[tuple[str, float, float], list[int]] = defaultdict(list)
    expected: list[tuple[Any, ...]] = []
    for event in trace:
        if event[0] == "watermark":
            watermark = max(watermark, float(event[1]))
            out.extend(_rows(op.on_watermark(float(event[1]))))
            continue
        _, key, ts, v = event
        out.extend(_rows(op.process([{"k": key, "t": float(ts), "v": v}])))
        for start, end in _windows_of(window, float(ts)):
            if end <= watermark:
                continue  # closed: late for it
            w = (key, start, end)
            members[w].append(v)
            since[w].append(v)
            if len(since[w]) == n:
                expected.append((key, start, end, sum(since[w] if purging else members[w])))
                since[w] = []
    out.extend(_rows(op.on_watermark(math.inf)))
    assert sorted(out) == sorted(expected)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["records", "wait", "watermark"]), st.integers(0, 30),
                          st.lists(st.tuples(st.sampled_from(KEYS), st.integers(0, 9)), max_size=4)),
                max_size=30),
       PERIODIC, st.booleans())
def test_early_firings_emit_each_changed_window_as_it_stands(trace: list[Any], window: Any, purging: bool) -> None:
    """Event time, early firings every second of processing time: at each early firing, every
    key that changed since the last one emits its incomplete windows as they stand (only what
    came since its last firing, when purging); then each window's final result at the watermark."""
    if purging and not isinstance(window, Tumbling):
        purging = False
    trigger = EventTimeTrigger().with_early_firings(every=1.0)
    op, clock = _operator(window, WindowTime.EVENT, trigger.purging() if purging else trigger, event_time=True)
    watermark = -math.inf
    members: dict[tuple[str, float, float], list[int]] = defaultdict(list)  # since the last firing, if purging
    dirty: set[str] = set()
    next_early = clock.now() + 1.0
    out: list[Any] = []
    expected: list[Any] = []

    def early(now: float) -> None:
        nonlocal next_early
        if now < next_early:
            return
        for (key, start, end), values in sorted(members.items()):
            if key in dirty and end > watermark and values:
                expected.append((key, start, end, sum(values)))
                if purging:
                    members[(key, start, end)] = []
        dirty.clear()
        next_early = now + 1.0

    for kind, number, batch in trace:
        if kind == "wait":
            target = clock.now() + number / 10
            while (t := op.next_timer()) is not None and t <= target:
                clock.advance(t - clock.now())
                out.extend(_rows(op.on_processing_time(clock.now())))
                early(clock.now())
            clock.advance(target - clock.now())
        elif kind == "watermark" and number > watermark:
            watermark = float(number)
            out.extend(_rows(op.on_watermark(watermark)))
            for w in sorted(members):
                if w[2] <= watermark:
                    if members[w]:
                        expected.append((*w, sum(members[w])))
                    del members[w]
        elif kind == "records" and batch:
            ts = float(number)
            rows = [{"k": k, "t": ts, "v": v} for k, v in batch]
            out.extend(_rows(op.process(rows)))
            for k, v in batch:
                for start, end in _windows_of(window, ts):
                    if end > watermark:
                        members[(k, start, end)].append(v)
                        dirty.add(k)
    out.extend(_rows(op.on_watermark(math.inf)))
    expected += [(*w, sum(vs)) for w, vs in sorted(members.items()) if vs]
    assert sorted(out) == sorted(expected)


def test_triggers_are_checked_against_the_windows() -> None:
    import pytest

    from epochal.plan.triggers import check_trigger
    from epochal.plan.windows import DeterministicWindow

    class Udw(DeterministicWindow[int]):
        def initial_state(self) -> int:
            return 0

        def on_record(self, state: int, timestamp: float, value: Any) -> tuple[int, int, int]:
            return state, 0, 0

    sliding = (("w", Sliding(10, 5)),)
    with pytest.raises(ValueError, match="one Tumbling query"):
        check_trigger(EventTimeTrigger().purging(), WindowTime.EVENT, sliding)
    with pytest.raises(ValueError, match="processing time"):
        check_trigger(ProcessingTimeTrigger(), WindowTime.EVENT, sliding)
    with pytest.raises(ValueError, match="Tumbling or Sliding"):
        check_trigger(CountTrigger(3), WindowTime.EVENT, (("s", Session(5)),))
    with pytest.raises(ValueError, match="early firings"):
        check_trigger(EventTimeTrigger().with_early_firings(every=1), WindowTime.EVENT, (("u", Udw()),))
    with pytest.raises(ValueError, match="count windows"):
        check_trigger(CountTrigger(3), WindowTime.COUNT, sliding)
    assert check_trigger(CountTrigger(3).purging(), WindowTime.PROCESSING, (("t", Tumbling(5)),)) is not None
