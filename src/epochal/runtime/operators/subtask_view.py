"""What every user function's context shows of its subtask (its index, the operator's
parallelism, the operator's list state, Flink's `RuntimeContext` basics), written once for the
process, co-process and join contexts that each add their own (keys, timers, join sides)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from ...state.operator_state import OperatorListState

if TYPE_CHECKING:
    from .base import OperatorContext
    from .lifecycle import UserFunctions


class RunningOperator(Protocol):
    ctx: OperatorContext
    functions: UserFunctions | None


def check_state_name(name: str) -> None:
    """A user's state name: `__` starts the names Epochal keeps for itself."""
    if name.startswith("__"):
        raise ValueError(f"state names starting with '__' are reserved: {name!r}")


class SubtaskView:
    """The subtask a function runs in, seen through its running operator (`_op`: its `ctx` and
    its `functions`, opened before any function sees the context)."""

    _op: RunningOperator  # each context narrows it to its operator's type

    @property
    def subtask(self) -> int:
        """The index of this subtask, in `[0, parallelism)`."""
        return self._op.ctx.subtask

    @property
    def parallelism(self) -> int:
        """How many subtasks the operator runs."""
        return self._op.ctx.parallelism

    def operator_list_state(self, name: str, mode: Any = "split") -> OperatorListState[Any]:
        """Register (or fetch) the operator list `name`: not keyed, split or broadcast on rescale."""
        check_state_name(name)
        functions = self._op.functions
        assert functions is not None
        return functions.store.list_state(name, mode)
