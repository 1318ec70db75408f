"""User functions' lifecycle and operator state: what a running operator owes a rich function.

Flink calls a rich function's `open` once per subtask, after `initializeState` restored its
operator state, and `close` at the end; a `CheckpointedFunction` writes its fields into operator
state at each checkpoint (`snapshotState`). `UserFunctions` does that for the user function
objects of one running operator (`plan.functions.RichFunction`), and holds the operator's
`OperatorStateStore` (`state.operator_state`): the lists it snapshots with the operator and
redistributes on rescale (split or broadcast). Keyed state stays in key groups; this is the
state that has no key.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Awaitable, Callable, Iterable
from typing import TYPE_CHECKING, Any

from ...errors import OperatorError
from ...plan.functions import RichFunction
from ...state.operator_state import OperatorListSnapshot, OperatorListState, OperatorStateStore, Redistribution
from .subtask_view import check_state_name

if TYPE_CHECKING:
    from .base import OperatorContext

log = logging.getLogger(__name__)

AwaitWith = Callable[[Awaitable[Any]], Any]  # runs an awaitable to its end (the async operator's loop)


def rich_functions(*candidates: Any) -> list[RichFunction]:
    """The `RichFunction`s among an operator's function objects (None and plain callables have
    no lifecycle)."""
    return [f for f in candidates if isinstance(f, RichFunction)]


class RuntimeContext:
    """What a rich function's `open(ctx)` sees; implements `epochal.RuntimeContext`.

    Args:
        operator: the operator's name.
        ctx: the running operator's context (subtask, parallelism, clock).
        store: the operator's operator state.
    """

    def __init__(self, operator: str, ctx: OperatorContext, store: OperatorStateStore) -> None:
        self._operator = operator
        self._ctx = ctx
        self._store = store

    @property
    def operator_name(self) -> str:
        """The operator's name (unique in the job)."""
        return self._operator

    @property
    def subtask(self) -> int:
        """The index of this subtask, in `[0, parallelism)`."""
        return self._ctx.subtask

    @property
    def parallelism(self) -> int:
        """How many subtasks the operator runs."""
        return self._ctx.parallelism

    @property
    def max_parallelism(self) -> int:
        """The job's key groups: the most subtasks a keyed operator can have."""
        return self._ctx.max_parallelism

    def current_processing_time(self) -> float:
        """Seconds since the epoch by the task's clock."""
        return self._ctx.clock.now()

    def operator_list_state(self, name: str, mode: Redistribution = "split") -> OperatorListState[Any]:
        """Register (or fetch) the operator list `name` (see `OperatorStateStore.list_state`).

        Raises:
            ValueError: `name` starts with `__` (reserved), or is registered with another mode.
        """
        check_state_name(name)
        return self._store.list_state(name, mode)


class UserFunctions:
    """The rich functions of one running operator, opened once, closed once, and their state.

    Args:
        operator: the operator's name, for errors.
        functions: the function objects whose hooks (`open`, `snapshot_state`, `close`) to call,
            where they have them (`rich_functions` picks the rich ones of an operator's functions).
    """

    def __init__(self, operator: str, functions: Iterable[Any] = ()) -> None:
        self.operator = operator
        self.functions = list(functions)
        self.store = OperatorStateStore()
        self.is_open = False
        self._closed = False

    def restore(self, ctx: OperatorContext, states: list[Any]) -> None:
        """Take this subtask's part of the operator lists of every old subtask (`states`)."""
        if not self.is_open:  # a live move's `restore({}, [])` leaves operator state alone
            self.store.restore(states, ctx.subtask, ctx.parallelism)

    def open(self, context: Any, await_with: AwaitWith | None = None) -> None:
        """Call every function's `open(context)` once; a coroutine `open` runs on `await_with`.

        Raises:
            OperatorError: naming the operator, when an `open` raised.
        """
        if self.is_open:
            return
        self.is_open = True
        for fn in self.functions:
            if (hook := getattr(fn, "open", None)) is not None:
                self._call(hook, "<open>", await_with, context)

    def snapshot(self, checkpoint_id: int) -> OperatorListSnapshot | None:
        """Let each function write its operator state (`snapshot_state`), then pickle the lists.

        Raises:
            OperatorError: naming the operator, when `snapshot_state` or pickling failed.
        """
        for fn in self.functions:
            if (hook := getattr(fn, "snapshot_state", None)) is not None:
                self._call(hook, "<snapshot_state>", None, checkpoint_id)
        try:
            return self.store.snapshot()
        except Exception as exc:
            raise OperatorError(self.operator, "<operator state>", exc) from exc

    def close(self, await_with: AwaitWith | None = None) -> None:
        """Call every opened function's `close()` once; an error is logged, not raised (closing
        follows a failure as often as a finish, and must not mask it)."""
        if self._closed or not self.is_open:
            return
        self._closed = True
        for fn in self.functions:
            if (hook := getattr(fn, "close", None)) is None:
                continue
            try:
                self._call(hook, "<close>", await_with)
            except Exception:
                log.warning("operator %r: close() of %s failed", self.operator, type(fn).__name__, exc_info=True)

    def _call(self, method: Callable[..., Any], what: str, await_with: AwaitWith | None, *args: Any) -> None:
        try:
            result = method(*args)
            if inspect.isawaitable(result):
                if await_with is None:
                    close = getattr(result, "close", None)
                    if close is not None:
                        close()  # no "never awaited" warning: the error says what went wrong
                    raise TypeError(f"{what[1:-1]}() returned an awaitable: only an AsyncFunction's "
                                    f"hooks may be coroutines")
                await_with(result)
        except OperatorError:
            raise
        except Exception as exc:
            raise OperatorError(self.operator, what, exc) from exc


def adopt_function(operator: Any, old: Any, new: Any, *, opened: bool) -> None:
    """A live patch replaced `operator`'s function `old` by `new` (`task.patching`): the rich
    functions' lifecycle follows. `new` takes `old`'s place (the operator state stays with the
    operator). On a running operator `new` opens, unless it was `opened` when staged (a process
    function opens on the operator's context then), and `old` closes; before the operator opens
    (a restore), `start` opens `new` as it would have opened `old`."""
    hooked = any(callable(getattr(new, hook, None)) for hook in ("open", "snapshot_state", "close"))
    functions: UserFunctions | None = operator.functions
    if functions is None:
        if not hooked:
            return
        functions = operator.functions = UserFunctions(operator.name, [])
    running = getattr(operator, "ctx", None) is not None
    if running and old in functions.functions and callable(close := getattr(old, "close", None)):
        try:
            close()
        except Exception:
            log.warning("operator %r: close() of the patched-out %s failed", operator.name, type(old).__name__,
                        exc_info=True)
    functions.functions = [f for f in functions.functions if f is not old] + ([new] if hooked else [])
    if running:
        functions.is_open = True
        if not opened and callable(hook := getattr(new, "open", None)):
            functions._call(hook, "<open>", None, RuntimeContext(operator.name, operator.ctx, functions.store))
