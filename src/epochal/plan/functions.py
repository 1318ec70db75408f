"""The lifecycle every user function may have, as the runtime sees it (Flink's rich functions).

A plain callable is all most operators need. A function that must set something up once per
subtask (a client, a model, a cache), tear it down, or keep checkpointed operator state of its
own subclasses `RichFunction` (through `epochal.MapFunction`, `epochal.AsyncFunction`, ...): the
runtime calls `open(ctx)` once per subtask, after its state was restored and before the first
record; `snapshot_state(checkpoint_id)` at every checkpoint, before the subtask's operator state
is fixed (Flink's `CheckpointedFunction.snapshotState`); `close()` when the subtask ends or its
attempt fails. The base lives here, in the plan, so that the runtime can recognise it without
importing the API (imports point one way); `epochal.api.rich` types its context.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Awaitable
from typing import Any, Generic, TypeVar

IN = TypeVar("IN")
OUT = TypeVar("OUT")


class RichFunction:
    """A user function with a lifecycle: `open(ctx)`, `snapshot_state(checkpoint_id)`, `close()`."""

    def open(self, ctx: Any) -> Any:
        """Set up once per subtask; `ctx` is an `epochal.RuntimeContext`: the subtask's index and
        parallelism, and its operator state (`ctx.operator_list_state(name)`)."""
        return None

    def snapshot_state(self, checkpoint_id: int) -> None:  # noqa: B027 - optional hook
        """A checkpoint is being taken: write what must survive a failure into operator state."""

    def close(self) -> Any:
        """Tear down what `open` set up; called once, also after a failure."""
        return None


class AsyncFunction(RichFunction, ABC, Generic[IN, OUT]):
    """A function called on the worker's asyncio event loop for each record (`map_async`).

    `open` and `close` may be coroutines too (`async def open(self, ctx)`): they run on the same
    loop, so a client made there (an `aiohttp.ClientSession`, say) belongs to it.
    """

    @abstractmethod
    def invoke(self, value: IN) -> Awaitable[OUT]:
        """The result for `value`; an `async def` (or a function returning an awaitable)."""
