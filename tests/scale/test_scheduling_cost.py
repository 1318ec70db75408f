"""The in-process host's cost per step does not grow with the number of tasks (issue 42).

It used to ask every task whether it could run before each step: at parallelism 128 (512 tasks)
most of a run went into asking. Tasks now say when something happened to them (an arrival, room
in a full output, a background result, a due timer: `runtime.task.wakeups`) and the host draws
only among those (`cluster.ready_tasks`). Counted here: `Task.is_runnable` calls per step, the
same job at parallelism 4 and 64 (8 and 128 tasks), with exactly-once output both times.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from epochal import StreamEnvironment
from epochal.runtime.task.task import Task
from epochal.testing import CollectSink, ListSource

N, KEYS = 6_000, 500


def _asks_per_step(parallelism: int, monkeypatch: pytest.MonkeyPatch) -> float:
    counts = Counter[str]()
    is_runnable, step = Task.is_runnable, Task.step

    def counted_is_runnable(self: Task) -> bool:
        counts["asks"] += 1
        return is_runnable(self)

    def counted_step(self: Task) -> None:
        counts["steps"] += 1
        step(self)

    monkeypatch.setattr(Task, "is_runnable", counted_is_runnable)
    monkeypatch.setattr(Task, "step", counted_step)
    sink = CollectSink()
    env = StreamEnvironment(parallelism=parallelism, executor="inprocess", max_parallelism=128)
    (env.from_source(ListSource(list(range(N)), splits=parallelism, batch_size=50))
        .map(lambda x: x).key_by(lambda x: x % KEYS).count().sink_to(sink))
    env.execute(f"asks-{parallelism}")
    monkeypatch.setattr(Task, "is_runnable", is_runnable)
    monkeypatch.setattr(Task, "step", step)

    expected: Counter[Any] = Counter()
    seen: Counter[int] = Counter()
    for x in range(N):
        seen[x % KEYS] += 1
        expected[(x % KEYS, seen[x % KEYS])] += 1
    assert Counter(sink.committed()) == expected
    return counts["asks"] / counts["steps"]


def test_a_step_costs_the_same_few_questions_at_parallelism_4_and_64(monkeypatch: pytest.MonkeyPatch) -> None:
    narrow = _asks_per_step(4, monkeypatch)
    wide = _asks_per_step(64, monkeypatch)
    # asking every task per step would be at least 128 asks a step at parallelism 64
    assert wide < 8, f"{wide:.1f} is_runnable calls per step at parallelism 64 ({narrow:.1f} at 4)"
    assert wide < 3 * narrow + 2, f"{wide:.1f} calls per step at parallelism 64 against {narrow:.1f} at 4"
