"""Random runs of a two-input operator, and brute-force references of what the joins must emit.

A scenario is a sequence of steps as a task would see them: a batch of the left input, a batch of
the right input, a watermark of one input (the operator's is the minimum of both), or a
checkpoint restored into another number of subtasks. Records are `(key, time, id)`; ids are
unique, so results compare exactly as multisets. Watermarks are drawn independently of the
records, so some records are late by any amount. The references see only what a record's
arrival makes of it: it is late when its time is below the operator's watermark then.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from hypothesis import strategies as st
from operator_harness import Subtasks

from epochal.plan.windows import Sliding, Tumbling

Rec = tuple[int, float, str]


@dataclass
class Scenario:
    steps: list[tuple[str, Any]]  # ("L" | "R", [records]) | ("WL" | "WR", watermark) | ("restore", parallelism)
    parallelism: int
    left: list[Rec] = field(default_factory=list)
    right: list[Rec] = field(default_factory=list)

    def arrivals(self) -> list[tuple[int, Rec, float]]:
        """`(side, record, operator watermark when it arrived)` in arrival order."""
        marks = [-math.inf, -math.inf]
        out = []
        for kind, payload in self.steps:
            if kind in ("L", "R"):
                w = min(marks)
                out.extend((0 if kind == "L" else 1, r, w) for r in payload)
            elif kind in ("WL", "WR"):
                i = 0 if kind == "WL" else 1
                marks[i] = max(marks[i], payload)
        return out


def _times(draw: Any) -> float:
    return draw(st.integers(0, 40)) / 2


@st.composite
def scenarios(draw: Any, max_records: int = 24, keys: int = 3) -> Scenario:
    n_left = draw(st.integers(0, max_records))
    n_right = draw(st.integers(0, max_records))
    left = [(draw(st.integers(0, keys - 1)), _times(draw), f"l{i}") for i in range(n_left)]
    right = [(draw(st.integers(0, keys - 1)), _times(draw), f"r{i}") for i in range(n_right)]
    if draw(st.booleans()):  # mostly in time order, as sources deliver: lateness the exception
        left.sort(key=lambda r: r[1])
        right.sort(key=lambda r: r[1])
    steps: list[tuple[str, Any]] = []
    i = j = 0
    while i < len(left) or j < len(right):
        kind = draw(st.sampled_from(["L", "R", "L", "R", "WL", "WR", "restore"]))
        if kind == "L" and i < len(left):
            n = draw(st.integers(1, 5))
            steps.append(("L", left[i:i + n]))
            i += n
        elif kind == "R" and j < len(right):
            n = draw(st.integers(1, 5))
            steps.append(("R", right[j:j + n]))
            j += n
        elif kind in ("WL", "WR"):
            steps.append((kind, _times(draw)))
        elif kind == "restore":
            steps.append(("restore", draw(st.integers(1, 4))))
    return Scenario(steps, draw(st.integers(1, 4)), left, right)


def run(scenario: Scenario, spec: Any, keys: tuple[Any, Any], backend: str = "memory",
        tmp: str | None = None) -> Subtasks:
    """Drive `spec` through the scenario (restoring where it says), then end both inputs."""
    subtasks = Subtasks(spec, keys, scenario.parallelism, backend=backend, tmp=tmp)
    marks = [-math.inf, -math.inf]
    operator_mark = -math.inf
    for kind, payload in scenario.steps:
        if kind == "L":
            subtasks.feed(0, payload)
        elif kind == "R":
            subtasks.feed(1, payload)
        elif kind in ("WL", "WR"):
            marks[0 if kind == "WL" else 1] = max(marks[0 if kind == "WL" else 1], payload)
            if min(marks) > operator_mark:
                operator_mark = min(marks)
                subtasks.watermark(operator_mark)
        else:
            restored = subtasks.snapshot()
            output = subtasks.output
            subtasks.close()
            subtasks = Subtasks(spec, keys, payload, restored, backend=backend, tmp=tmp)
            subtasks.output = output  # what was emitted before the checkpoint stays emitted
    subtasks.watermark(math.inf)
    subtasks.close()
    return subtasks


# -- references ---------------------------------------------------------------------------------

def late_records(scenario: Scenario) -> tuple[Counter[Rec], Counter[Rec]]:
    """The records of each side whose time was below the operator's watermark when they came."""
    late: tuple[Counter[Rec], Counter[Rec]] = (Counter(), Counter())
    for side, record, w in scenario.arrivals():
        if record[1] < w:
            late[side][record] += 1
    return late


def _emit(out: Counter[Any], left: Rec, matched: list[Rec], how: str) -> None:
    """What a join of type `how` emits for `left` and the right records it met."""
    if how == "semi":
        if matched:
            out[left] += 1
        return
    out.update((left, r) for r in matched)
    if how == "left" and not matched:
        out[(left, None)] += 1


def interval_reference(scenario: Scenario, lower: float, upper: float, lower_inclusive: bool,
                       upper_inclusive: bool, how: str) -> Counter[Any]:
    late = late_records(scenario)
    lefts = [r for r in scenario.left if r not in late[0]]
    rights = [r for r in scenario.right if r not in late[1]]

    def meets(lt: float, rt: float) -> bool:
        low = lt + lower <= rt if lower_inclusive else lt + lower < rt
        high = rt <= lt + upper if upper_inclusive else rt < lt + upper
        return low and high

    out: Counter[Any] = Counter()
    for left in lefts:
        _emit(out, left, [r for r in rights if r[0] == left[0] and meets(left[1], r[1])], how)
    return out


def window_reference(scenario: Scenario, window: Tumbling | Sliding, lateness: float,
                     how: str) -> tuple[Counter[Any], Counter[Rec], Counter[Rec]]:
    """Pairs per window of the records the window took; and the late records of each side (a
    record is late if some window holding it was closed for it)."""
    taken: dict[int, list[tuple[int, Rec]]] = {}
    late: tuple[Counter[Rec], Counter[Rec]] = (Counter(), Counter())
    for side, record, w in scenario.arrivals():
        t = record[1]
        ks = range(window.first_end_index(t), window.last_start_index(t) + 1)
        closed = [k for k in ks if window.end_of(k) + lateness <= w]
        if closed:
            late[side][record] += 1
        for k in ks:
            if k not in closed:
                taken.setdefault(k, []).append((side, record))
    out: Counter[Any] = Counter()
    for members in taken.values():
        lefts = [r for s, r in members if s == 0]
        rights = [r for s, r in members if s == 1]
        for left in lefts:
            _emit(out, left, [r for r in rights if r[0] == left[0]], how)
    return out, late[0], late[1]


def temporal_reference(scenario: Scenario, how: str) -> Counter[Any]:
    """Each on-time left record with the on-time version of its key valid at its time (the
    latest at or before it; of equal times, the last to arrive)."""
    late = late_records(scenario)
    versions: list[tuple[int, Rec]] = []  # (arrival, version)
    arrivals = scenario.arrivals()
    for n, (side, record, w) in enumerate(arrivals):
        if side == 1 and record[1] >= w:
            versions.append((n, record))
    out: Counter[Any] = Counter()
    for left in scenario.left:
        if left in late[0]:
            continue
        valid = [(v[1], n, v) for n, v in versions if v[0] == left[0] and v[1] <= left[1]]
        _emit(out, left, [max(valid)[2]] if valid else [], how)
    return out


def arrival_reference(scenario: Scenario, how: str) -> Counter[Any]:
    """A lookup join: each left record with the newest version of its key when it arrived."""
    newest: dict[int, Rec] = {}
    out: Counter[Any] = Counter()
    for side, record, _ in scenario.arrivals():
        if side == 1:
            newest[record[0]] = record
        else:
            _emit(out, record, [newest[record[0]]] if record[0] in newest else [], how)
    return out


def describe(scenario: Scenario) -> str:
    return "\n".join(f"{kind} {payload}" for kind, payload in scenario.steps) + f"\nparallelism {scenario.parallelism}"


KEY: Callable[[Rec], int] = lambda r: r[0]  # noqa: E731 - the key of every record
