"""Async I/O for users: `stream.map_async(fn)` calls a coroutine per record, many in flight.

A lookup against a service, made synchronously in a `map`, holds the worker for the whole
round trip; `map_async` keeps up to `capacity` requests in flight per subtask on the worker's
asyncio event loop instead (Flink's `AsyncDataStream`), so throughput grows with the capacity
until the service or the CPU is the limit. Results come in input order (`ordered=True`) or as
they complete (`ordered=False`, never across a watermark). A request that raises, or takes
longer than `timeout`, follows `on_error`. Requests in flight at a checkpoint are part of it and
are made again after a restore: every result is committed once, every request made at least once.
"""

from __future__ import annotations

import inspect
from abc import abstractmethod
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from ..plan.functions import AsyncFunction as _PlanAsyncFunction
from ..plan.specs import AsyncMapSpec
from ..validation import check_bool, check_int, check_seconds
from .rich import RichFunction

if TYPE_CHECKING:
    from .checks import OnErrorChoice
    from .stream import DataStream

IN = TypeVar("IN")
OUT = TypeVar("OUT")


class AsyncFunction(RichFunction, _PlanAsyncFunction[IN, OUT], Generic[IN, OUT]):
    """An async function with a lifecycle, for `map_async`: `invoke(value)` is awaited per record.

    `open(ctx)` and `close()` may be coroutines (`async def`): they run on the worker's event
    loop, so a client made in `open` belongs to it.

    Example:
        >>> import asyncio
        >>> class Lookup(AsyncFunction):
        ...     async def open(self, ctx):
        ...         self.table = {"a": 1}          # an aiohttp.ClientSession(), say
        ...     async def invoke(self, value):
        ...         await asyncio.sleep(0.001)     # the round trip
        ...         return (value, self.table.get(value))
    """

    @abstractmethod
    async def invoke(self, value: IN) -> OUT:
        """The result for `value`."""


def async_spec(stream: DataStream[Any], fn: Any, capacity: int, timeout: float | None, ordered: bool,
               on_error: OnErrorChoice) -> Callable[[str], AsyncMapSpec]:
    """The spec factory of `DataStream.map_async`, its arguments checked."""
    from .checks import on_error_policy

    if not isinstance(fn, _PlanAsyncFunction) and not callable(fn):
        raise TypeError(f"fn must be an async function (async def) or an AsyncFunction, got {fn!r}")
    if not isinstance(fn, _PlanAsyncFunction) and inspect.isfunction(fn) and not inspect.iscoroutinefunction(fn):
        raise TypeError(f"fn must be an async function (async def f(record): ...), got the plain function {fn!r}; "
                        f"use map() for a synchronous one")
    check_int("capacity", capacity)
    if timeout is not None:
        timeout = check_seconds("timeout", timeout)
    check_bool("ordered", ordered)
    policy = on_error_policy(stream._env, on_error, "map_async")
    return lambda n: AsyncMapSpec(n, n, fn, capacity, timeout, ordered, policy)

# `epochal/__init__.py` re-homes this class to `epochal`; list it so doctest still finds it.
__test__ = {"AsyncFunction": AsyncFunction}
