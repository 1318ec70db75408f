"""A keyed co-process function and a keyed broadcast function against brute-force references,
over the random runs the joins are checked on (`join_scenarios`): random interleavings and batch
boundaries of both inputs, watermarks drawn apart from the records, checkpoints restored at random
points into 1 to 4 subtasks (key groups split anew; the broadcast state from its one copy).

The functions make every step visible: the co-process pairs each record with what the other side
sent before it (keyed state of both sides) and a right record's event-time timer reports the left
records of its key before it that had come when it fired; the broadcast function emits each data
record with a running count of its key (keyed state) and the rules that had come before it
(broadcast state). A state lost, duplicated or left behind by a restore changes an output.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable
from typing import Any

from hypothesis import HealthCheck, given, settings
from join_scenarios import KEY, Rec, Scenario, describe, run, scenarios
from operator_harness import Subtasks

from epochal import KeyedBroadcastProcessFunction, KeyedCoProcessFunction, MapStateDescriptor
from epochal.plan.two_inputs import BroadcastProcessSpec, KeyedCoProcessSpec

SETTINGS = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
RULES = MapStateDescriptor("rules")


class PairsAndTimers(KeyedCoProcessFunction):
    def open(self, ctx: Any) -> None:
        self.lefts = ctx.list_state("lefts")
        self.rights = ctx.list_state("rights")
        self.waiting = ctx.map_state("waiting")

    def process_element1(self, value: Rec, ctx: Any) -> Iterable[Any]:
        self.lefts.add(value)
        return [("pair", value[2], r[2]) for r in self.rights.get()]

    def process_element2(self, value: Rec, ctx: Any) -> Iterable[Any]:
        self.rights.add(value)
        self.waiting.put(value[1], [*(self.waiting.get(value[1]) or []), value[2]])
        ctx.timers.register_event_time(value[1])
        return [("pair", left[2], value[2]) for left in self.lefts.get()]

    def on_timer(self, timestamp: float, ctx: Any) -> Iterable[Any]:
        before = tuple(sorted(left[2] for left in self.lefts.get() if left[1] < timestamp))
        for right in self.waiting.get(timestamp) or []:
            yield ("fired", right, before)
        self.waiting.remove(timestamp)


def _watermark_calls(scenario: Scenario) -> list[tuple[int, float]]:
    """`(step index, watermark)` of each watermark the operator receives, as `run` sends them."""
    marks, current, calls = [-math.inf, -math.inf], -math.inf, []
    for n, (kind, payload) in enumerate(scenario.steps):
        if kind in ("WL", "WR"):
            i = 0 if kind == "WL" else 1
            marks[i] = max(marks[i], payload)
            if min(marks) > current:
                current = min(marks)
                calls.append((n, current))
    calls.append((len(scenario.steps), math.inf))
    return calls


def co_process_reference(scenario: Scenario) -> Counter[Any]:
    """Every cross-side pair of a key once; each right record's timer fires at the first watermark
    after it came that reaches its time, and sees the left records of its key that came before."""
    out: Counter[Any] = Counter()
    out.update(("pair", a[2], b[2]) for a in scenario.left for b in scenario.right if a[0] == b[0])
    came: list[tuple[int, int, Rec]] = []  # (step index, side, record)
    for n, (kind, payload) in enumerate(scenario.steps):
        if kind in ("L", "R"):
            came.extend((n, 0 if kind == "L" else 1, r) for r in payload)
    calls = _watermark_calls(scenario)
    for n, side, right in came:
        if side != 1:
            continue
        fired_at = next(m for m, w in calls if m > n and w >= right[1])
        before = tuple(sorted(r[2] for m, s, r in came if s == 0 and m < fired_at and r[0] == right[0]
                              and r[1] < right[1]))
        out[("fired", right[2], before)] += 1
    return out


@SETTINGS
@given(scenarios())
def test_keyed_co_process_equals_the_reference(scenario: Scenario) -> None:
    spec = KeyedCoProcessSpec("c", "c", (KEY, KEY), PairsAndTimers())
    done = run(scenario, spec, (KEY, KEY))
    assert Counter(done.output.results) == co_process_reference(scenario), describe(scenario)


class CountsAndRules(KeyedBroadcastProcessFunction):
    def open(self, ctx: Any) -> None:
        self.count = ctx.value_state("count", default=0)

    def process_element(self, value: Rec, ctx: Any) -> Iterable[Any]:
        n = self.count.value() + 1
        self.count.update(n)
        yield (value[2], n, tuple(sorted(ctx.broadcast_state(RULES).keys())))

    def process_broadcast_element(self, value: Rec, ctx: Any) -> None:
        ctx.broadcast_state(RULES).put(value[2], value[1])


def broadcast_reference(scenario: Scenario) -> Counter[Any]:
    out: Counter[Any] = Counter()
    rules: list[str] = []
    counts: Counter[int] = Counter()
    for kind, payload in scenario.steps:
        for record in payload if kind in ("L", "R") else ():
            if kind == "R":
                rules.append(record[2])
            else:
                counts[record[0]] += 1
                out[(record[2], counts[record[0]], tuple(sorted(rules)))] += 1
    return out


@SETTINGS
@given(scenarios())
def test_keyed_broadcast_process_equals_the_reference(scenario: Scenario) -> None:
    spec = BroadcastProcessSpec("b", "b", KEY, CountsAndRules(), ("rules",))
    done = run(scenario, spec, (KEY, None))
    assert Counter(done.output.results) == broadcast_reference(scenario), describe(scenario)


def test_the_broadcast_state_is_checkpointed_per_subtask_and_restored_into_any_parallelism() -> None:
    """Every subtask writes its copy (the same, aligned); each subtask of a restore at 1 to 4 reads one."""
    spec = BroadcastProcessSpec("b", "b", KEY, CountsAndRules(), ("rules",))
    subtasks = Subtasks(spec, (KEY, None), 3)
    subtasks.feed(1, [(0, 1.0, "r0"), (0, 2.0, "r1")])
    keyed, states = subtasks.snapshot()
    assert len(states) == 3 and all(s == states[0] for s in states) and states[0] is not None
    for parallelism in (1, 2, 3, 4):
        restored = Subtasks(spec, (KEY, None), parallelism, (keyed, states))
        restored.feed(0, [(k, 3.0, f"l{k}") for k in range(8)])
        assert {r[2] for r in restored.output.results} == {("r0", "r1")}
        assert len(restored.output.results) == 8
