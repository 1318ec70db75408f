"""Which tasks the in-process executor may step next: the ones something happened to.

The in-process host runs every task of a job on one thread; asking each task whether it can run
before every step made a job at parallelism 128 (512 tasks) spend most of its time asking (issue
42: 13x the run time of parallelism 8 on the same input). Tasks now say when that may have
changed (`runtime.task.wakeups`): the host keeps those *woken* tasks, and a task found unable to
run leaves the set until it is woken again. Timers are kept in a heap: a task whose next timer
(an operator's, or a source's retry) is due is woken then.

The order stays replayable: the set is a list with an index (no hash order), a task is drawn
from it with the executor's seeded generator, and a woken task that cannot run is dropped and
another drawn, which is a uniform draw among the runnable ones, as the executor made before.
When nothing is woken the executor asks every task (`rescan`): a wake-up a task failed to give
costs time then, never progress. It also rescans every `RESCAN_EVERY` draws.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable

from ..runtime.task.task import Task

RESCAN_EVERY = 4096  # draws between two looks at every task (a bound on a missed wake-up's cost)


class ReadyTasks:
    """The woken tasks of one attempt, and when the others' timers are due."""

    def __init__(self, tasks: Iterable[Task]) -> None:
        self.tasks = list(tasks)
        self._woken: list[Task] = []
        self._index: dict[int, int] = {}  # id(task) → its place in `_woken`
        self._timers: list[tuple[float, int, Task]] = []
        self._timer_of: dict[int, float] = {}  # id(task) → the due time in the heap
        self._seq = 0
        self._draws = 0
        for task in self.tasks:
            task.wake = self._waker(task)
            task.wake()

    def _waker(self, task: Task) -> Callable[[], None]:
        index, woken = self._index, self._woken
        key = id(task)

        def wake() -> None:
            if key not in index:
                index[key] = len(woken)
                woken.append(task)

        return wake

    @property
    def woken(self) -> list[Task]:
        """The woken tasks, in a replayable order (draw from it by index)."""
        return self._woken

    def __len__(self) -> int:
        return len(self._woken)

    def counted_draw(self) -> bool:
        """Count a draw; True every `RESCAN_EVERY` draws, when the caller should `rescan`."""
        self._draws += 1
        return self._draws % RESCAN_EVERY == 0

    def drop(self, task: Task) -> None:
        """`task` cannot run: out of the set until it is woken again."""
        index, woken = self._index, self._woken
        at = index.pop(id(task))
        last = woken.pop()
        if last is not task:
            woken[at] = last
            index[id(last)] = at

    def stepped(self, task: Task, still_runnable: bool) -> None:
        """`task` ran: it stays woken if it can run on; its next timer goes into the heap."""
        if not still_runnable and id(task) in self._index:
            self.drop(task)
        timer = task.next_timer()
        if timer is not None and self._timer_of.get(id(task)) != timer:
            self._timer_of[id(task)] = timer
            self._seq += 1
            heapq.heappush(self._timers, (timer, self._seq, task))

    def due(self, now: float) -> None:
        """Wake the tasks whose timers are due."""
        timers = self._timers
        while timers and timers[0][0] <= now:
            _, _, task = heapq.heappop(timers)
            self._timer_of.pop(id(task), None)
            task.wake()

    def rescan(self) -> bool:
        """Ask every task; wake the runnable ones. True if any was."""
        found = False
        for task in self.tasks:
            if task.is_runnable():
                task.wake()
                found = True
        for task in self.tasks:  # timers set by something other than a step (a restore)
            timer = task.next_timer()
            if timer is not None and self._timer_of.get(id(task)) != timer:
                self._timer_of[id(task)] = timer
                self._seq += 1
                heapq.heappush(self._timers, (timer, self._seq, task))
        return found
