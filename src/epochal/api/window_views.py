"""Typed views of windowed streams whose result rows are not `(key, start, end, result)`.

One window operator builds every windowed stream (`api.windows.WindowedStream`); only the rows
differ: several named queries (`keyed.windows({...})`) add the query's name, `window_all` leaves
the key out. These views say so to a type checker (`DataStream[T]`, tests/api/test_typing.py)
and hand every call to the windowed stream they wrap.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Generic, Self, TypeVar

from .checks import OnErrorChoice

if TYPE_CHECKING:
    from ..plan.time import Duration
    from ..plan.triggers import Trigger
    from .functions import AggregateFunction, ProcessWindowFunction
    from .windows import Value, WindowedStream, WindowResults

K = TypeVar("K")
T = TypeVar("T")
R = TypeVar("R")
NamedRow = tuple[K, str, float, float, R]  # (key, query, window_start, window_end, result)
AllRow = tuple[float, float, R]  # (window_start, window_end, result)


def _typed(results: WindowResults[Any]) -> WindowResults[Any]:
    """The results, as the view's row type says (the same operator, rows shaped by it)."""
    return results


class _View:
    def __init__(self, windowed: WindowedStream[Any, Any]) -> None:
        self._windowed = windowed

    def allowed_lateness(self, lateness: Duration) -> Self:
        """As `WindowedStream.allowed_lateness`."""
        self._windowed.allowed_lateness(lateness)
        return self

    def trigger(self, trigger: Trigger) -> Self:
        """As `WindowedStream.trigger`."""
        self._windowed.trigger(trigger)
        return self


class NamedWindowedStream(_View, Generic[K, T]):
    """Several named window queries over a keyed stream (`KeyedStream.windows`); each result
    row names its query: `(key, query, window_start, window_end, result)`."""

    def count(self, *, name: str | None = None, on_error: OnErrorChoice = "fail", combine: bool | None = None
              ) -> WindowResults[NamedRow[K, int]]:
        """As `WindowedStream.count`."""
        return _typed(self._windowed.count(name=name, on_error=on_error, combine=combine))

    def sum(self, value: Value = None, *, name: str | None = None, on_error: OnErrorChoice = "fail",
            combine: bool | None = None) -> WindowResults[NamedRow[K, Any]]:
        """As `WindowedStream.sum`."""
        return _typed(self._windowed.sum(value, name=name, on_error=on_error, combine=combine))

    def min(self, value: Value = None, *, name: str | None = None, on_error: OnErrorChoice = "fail",
            combine: bool = False) -> WindowResults[NamedRow[K, Any]]:
        """As `WindowedStream.min`."""
        return _typed(self._windowed.min(value, name=name, on_error=on_error, combine=combine))

    def max(self, value: Value = None, *, name: str | None = None, on_error: OnErrorChoice = "fail",
            combine: bool = False) -> WindowResults[NamedRow[K, Any]]:
        """As `WindowedStream.max`."""
        return _typed(self._windowed.max(value, name=name, on_error=on_error, combine=combine))

    def reduce(self, fn: Callable[[T, T], T], *, name: str | None = None, on_error: OnErrorChoice = "fail"
               ) -> WindowResults[NamedRow[K, T]]:
        """As `WindowedStream.reduce`."""
        return _typed(self._windowed.reduce(fn, name=name, on_error=on_error))

    def aggregate(self, function: AggregateFunction[T, Any, R], *, name: str | None = None,
                  on_error: OnErrorChoice = "fail") -> WindowResults[NamedRow[K, R]]:
        """As `WindowedStream.aggregate`."""
        return _typed(self._windowed.aggregate(function, name=name, on_error=on_error))

    def process(self, function: ProcessWindowFunction[K, T, R], *, name: str | None = None,
                on_error: OnErrorChoice = "fail") -> WindowResults[R]:
        """As `WindowedStream.process` (`window.query` names the query)."""
        return _typed(self._windowed.process(function, name=name, on_error=on_error))


class AllWindowedStream(_View, Generic[T]):
    """Windows over every record of a stream that is not keyed (`DataStream.window_all`, one
    subtask): result rows leave the key out, `(window_start, window_end, result)`."""

    def count(self, *, name: str | None = None, on_error: OnErrorChoice = "fail") -> WindowResults[AllRow[int]]:
        """As `WindowedStream.count`."""
        return _typed(self._windowed.count(name=name, on_error=on_error))

    def sum(self, value: Value = None, *, name: str | None = None, on_error: OnErrorChoice = "fail"
            ) -> WindowResults[AllRow[Any]]:
        """As `WindowedStream.sum`."""
        return _typed(self._windowed.sum(value, name=name, on_error=on_error))

    def min(self, value: Value = None, *, name: str | None = None, on_error: OnErrorChoice = "fail"
            ) -> WindowResults[AllRow[Any]]:
        """As `WindowedStream.min`."""
        return _typed(self._windowed.min(value, name=name, on_error=on_error))

    def max(self, value: Value = None, *, name: str | None = None, on_error: OnErrorChoice = "fail"
            ) -> WindowResults[AllRow[Any]]:
        """As `WindowedStream.max`."""
        return _typed(self._windowed.max(value, name=name, on_error=on_error))

    def reduce(self, fn: Callable[[T, T], T], *, name: str | None = None, on_error: OnErrorChoice = "fail"
               ) -> WindowResults[AllRow[T]]:
        """As `WindowedStream.reduce`."""
        return _typed(self._windowed.reduce(fn, name=name, on_error=on_error))

    def aggregate(self, function: AggregateFunction[T, Any, R], *, name: str | None = None,
                  on_error: OnErrorChoice = "fail") -> WindowResults[AllRow[R]]:
        """As `WindowedStream.aggregate`."""
        return _typed(self._windowed.aggregate(function, name=name, on_error=on_error))

    def process(self, function: ProcessWindowFunction[Any, T, R], *, name: str | None = None,
                on_error: OnErrorChoice = "fail") -> WindowResults[R]:
        """As `WindowedStream.process` (its `key` is None)."""
        return _typed(self._windowed.process(function, name=name, on_error=on_error))
