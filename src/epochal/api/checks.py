"""What every operator-adding method of the API checks the same way: `on_error` and names."""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from ..errors import GraphError
from ..plan.logical import LogicalGraph
from ..plan.specs import OnError
from ..validation import check_choice, check_int, check_name

if TYPE_CHECKING:
    from .environment import StreamEnvironment

OnErrorChoice = Literal["fail", "skip", "dead_letter"]
WindowTimeChoice = Literal["event", "processing"]
ON_ERROR_CHOICES: tuple[OnErrorChoice, ...] = ("fail", "skip", "dead_letter")


def on_error_policy(env: StreamEnvironment, on_error: object, operator: str) -> OnError:
    """The `OnError` an `on_error` argument names; `dead_letter` needs the environment's sink.

    Raises:
        GraphError: `on_error="dead_letter"` in an environment without a dead-letter sink.
    """
    policy = OnError(check_choice("on_error", on_error, ON_ERROR_CHOICES))
    if policy is OnError.DEAD_LETTER and env.dead_letter is None:
        raise GraphError(
            f"{operator}(on_error='dead_letter') needs the job's dead-letter sink: "
            "StreamEnvironment(dead_letter=<any Sink>), e.g. dead_letter=FileSink('dlq/')"
        )
    return policy


def _name_or_unique(graph: LogicalGraph, name: str | None, base: str) -> str:
    """The operator name a user gave (checked), or a new unique one made from `base`."""
    return graph.unique_name(base) if name is None else check_name("name", name)


def _processes(processes: int | None, fn: object) -> int:
    """A function pool's size: None runs the function in line (0).

    Raises:
        GraphError: a pool for a rich function (its `open`, operator state and `close` belong to
            the subtask, which a pool's processes are not).
    """
    if processes is None:
        return 0
    check_int("processes", processes, minimum=1)
    if callable(getattr(fn, "open", None)) or callable(getattr(fn, "snapshot_state", None)):
        raise GraphError("processes= runs plain functions: a rich function (open, operator state, close) runs in "
                         "its subtask; open the client in each call or drop processes=")
    return processes
