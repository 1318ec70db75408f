"""Async I/O: a user's coroutine per record, many in flight, on the worker's event loop.

Flink's `AsyncWaitOperator` (`AsyncDataStream.orderedWait` / `unorderedWait`), on the host's
asyncio loop (`runtime.aio`): each record starts a request (`function.invoke(record)`, or the
coroutine function itself) as an asyncio task; at most `capacity` records are in flight, and a
task whose operator is full reads no input until one leaves (backpressure). Results leave in
input order (`ordered`) or as they complete, never across a watermark (`async_queue`); a
watermark waits behind the records that came before it. A request that raises or outlives
`timeout` follows the operator's `on_error` (fail, skip, dead-letter), in result order.

Exactly once: a checkpoint keeps the records of every request in flight at its barrier, and
of those waiting for capacity (operator state, a split list, as Flink's), and a restore issues
them again: their results belong to the epoch after the checkpoint, so none is lost and none
committed twice. The requests themselves run at least once (a request in flight when a worker
dies is made again): make them idempotent.

When the input ends the operator keeps the task from ending until its last request has left
(`has_pending`): the chain's end of input resumes after it (`OperatorChain.end_input`).
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Awaitable
from functools import partial
from typing import Any

from ...plan.functions import AsyncFunction
from ...plan.specs import AsyncMapSpec
from .. import aio
from ..wire.batches import to_records
from ..wire.elements import Batch
from .async_queue import AsyncQueue, Entry
from .bad_records import DeadLetter, with_letters
from .base import OperatorContext, OperatorSnapshot, RuntimeOperator
from .lifecycle import RuntimeContext, UserFunctions, rich_functions

log = logging.getLogger(__name__)

IN_FLIGHT = "__in_flight__"  # the operator list of records in flight at a checkpoint
CLOSE_TIMEOUT = 10.0  # seconds an async `open` or `close` may take


class AsyncWaitOperator(RuntimeOperator):
    """`map_async`: up to `capacity` calls of an async function in flight per subtask."""

    is_async = True  # the chain polls it for results and holds watermarks behind it

    def __init__(self, spec: AsyncMapSpec) -> None:
        super().__init__(spec)
        function = spec.function
        self.invoke = function.invoke if isinstance(function, AsyncFunction) else function
        self.capacity = spec.capacity
        self.timeout = spec.timeout
        self.on_error = spec.on_error
        self.queue = AsyncQueue(spec.ordered)
        self.waiting: deque[Any] = deque()  # records that came while the queue was full
        self.functions = UserFunctions(self.name, rich_functions(function))
        self._tasks: dict[asyncio.Task[Any], Entry] = {}

    def open(self, ctx: OperatorContext) -> None:
        super().open(ctx)
        self.driver = aio.driver()

    def start(self, states: list[Any]) -> None:
        """Restore the records in flight at the checkpoint and open the function (on the loop,
        if its `open` is a coroutine); then issue them again."""
        functions = self.functions
        assert functions is not None
        functions.restore(self.ctx, states)
        self.in_flight = functions.store.list_state(IN_FLIGHT)
        self.waiting.extend(self.in_flight.get())
        self.in_flight.clear()
        functions.open(RuntimeContext(self.name, self.ctx, functions.store), self._await)
        self._issue()

    def _await(self, awaitable: Awaitable[Any]) -> Any:
        return self.driver.run(awaitable, CLOSE_TIMEOUT)

    # -- records -------------------------------------------------------------------------------
    def process(self, batch: Batch) -> Batch | None:
        self.waiting.extend(to_records(batch))
        self._issue()
        return None  # results leave through `take_ready`

    def _issue(self) -> None:
        """Start requests for waiting records while the queue has room."""
        waiting, queue, capacity = self.waiting, self.queue, self.capacity
        if not waiting or queue.size >= capacity:
            return
        loop, driver = self.driver.loop, self.driver
        while waiting and queue.size < capacity:
            record = waiting.popleft()
            entry = Entry(record)
            queue.add(entry)
            task = loop.create_task(self._call(record))
            self._tasks[task] = entry
            driver.busy += 1
            task.add_done_callback(partial(self._done, entry))

    async def _call(self, record: Any) -> Any:
        awaitable = self.invoke(record)
        if self.timeout is None:
            return await awaitable
        try:
            return await asyncio.wait_for(awaitable, self.timeout)
        except TimeoutError:
            raise TimeoutError(f"no result within {self.timeout} s") from None

    def _done(self, entry: Entry, task: asyncio.Task[Any]) -> None:
        """On the loop, when a request ends: its entry completes (unless it was cancelled)."""
        self.driver.busy -= 1
        self._tasks.pop(task, None)
        if task.cancelled():
            return  # closing: the entry is dropped with the queue
        error = task.exception()
        entry.complete(None if error is not None else task.result(), error)
        self.queue.completed(entry)

    # -- what the chain asks -------------------------------------------------------------------
    def is_saturated(self) -> bool:
        """Whether the task should read no input now: the queue is full, or records wait for room."""
        return bool(self.waiting) or self.queue.size >= self.capacity

    def has_ready(self) -> bool:
        """Whether results (or watermarks) may leave now."""
        return self.queue.has_ready()

    def has_pending(self) -> bool:
        """Whether records are still in flight or waiting."""
        return bool(self.waiting) or self.queue.size > 0

    def hold_watermark(self, advance: Any) -> bool:
        """A watermark arrived: True if it waits behind records in flight (it leaves later,
        through `take_ready`), False if it may go on at once."""
        if self.waiting:  # records not issued yet came before it: issue them first in line
            self._issue_all_for_watermark()
        return self.queue.add_watermark(advance)

    def _issue_all_for_watermark(self) -> None:
        # A watermark must follow every record that came before it, including those still waiting
        # for room; they enter the queue now, beyond capacity, so the watermark can be placed.
        capacity, self.capacity = self.capacity, len(self.queue) + len(self.waiting)
        try:
            self._issue()
        finally:
            self.capacity = capacity

    def take_ready(self) -> list[Any]:
        """What leaves now, in order: batches of results (with dead letters) and watermarks."""
        out: list[Any] = []
        results: list[Any] = []
        letters: list[DeadLetter] = []
        for item in self.queue.take_ready():
            if type(item) is not Entry:  # a watermark: the results before it go first
                if results or letters:
                    out.append(with_letters(results, letters))
                    results, letters = [], []
                out.append(item)
            elif item.error is None:
                results.append(item.result)
            else:
                error = item.error
                self.reject(item.record, error if isinstance(error, Exception) else RuntimeError(error), letters)
        if results or letters:
            out.append(with_letters(results, letters))
        self._issue()
        return out

    # -- checkpoints ---------------------------------------------------------------------------
    def snapshot(self, checkpoint_id: int) -> OperatorSnapshot:
        """Every record in flight or waiting, in input order, goes into the checkpoint."""
        self.in_flight.update([*self.queue.records(), *self.waiting])
        try:
            return super().snapshot(checkpoint_id)
        finally:
            self.in_flight.clear()

    def close(self) -> None:
        """Cancel the requests in flight, then close the function (on the loop)."""
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        driver = getattr(self, "driver", None)
        if driver is not None and tasks:
            driver.pump()  # the cancellations run
        if self.functions is not None:
            self.functions.close(self._await if driver is not None else None)
