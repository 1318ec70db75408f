"""Commands to a running job: small frozen requests, each with the type of its result.

A command is made where a user or a script asks (`JobHandle`, the control endpoint, the CLI) and
checked there, once, for what it can know alone (a parallelism is a positive int, a move names
key groups and subtasks); the job master's `CommandDesk` checks what only the running job
knows (the job's max parallelism, its task slots, whether key groups can move) and hands each
kind to its own handler. A `Ticket` carries the outcome back across threads: `wait()` returns
the command's result type or raises why it failed.

Flink's REST API takes the same requests as untyped JSON; here a new kind is a new type and a
handler, never another branch of an `if` on a string.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Generic, TypeVar

R = TypeVar("R")
R_co = TypeVar("R_co", covariant=True)


class Command(Generic[R_co]):
    """A request to a running job whose result is an `R_co`."""

    __slots__ = ()
    kind: ClassVar[str]  # what it is called in messages: "savepoint", "rescale", ...


def _positive_int(name: str, value: object, minimum: int = 1) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise ValueError(f"{name} must be an int of at least {minimum}, got {value!r}")
    return value


@dataclass(frozen=True, slots=True)
class Savepoint(Command[str]):
    """Take a checkpoint now and copy it into `target` (a new or empty directory); its location."""

    target: str
    kind: ClassVar[str] = "savepoint"

    def __post_init__(self) -> None:
        if not isinstance(self.target, str) or not self.target.strip():
            raise ValueError(f"a savepoint needs a target directory, got {self.target!r}")


@dataclass(frozen=True, slots=True)
class Rescale(Command[int | None]):
    """Run at `parallelism` from now on; the checkpoint it rescaled at (None: nothing changed
    and no checkpoint exists yet)."""

    parallelism: int
    kind: ClassVar[str] = "rescale"

    def __post_init__(self) -> None:
        n = self.parallelism
        if not isinstance(n, int) or isinstance(n, bool) or n < 1:
            raise ValueError(f"parallelism must be an int from 1 to the job's max_parallelism, got {n!r}")


@dataclass(frozen=True, slots=True)
class Move(Command[int]):
    """Move key groups to subtasks of the keyed operators, live: `moves` are (group, subtask)
    pairs; in steps of at most `batch` groups, or when None of about
    `StateConfig.migration_step_bytes` of state each (Megaphone's batched migration). Its
    result is the checkpoint the last group moved at."""

    moves: tuple[tuple[int, int], ...]
    batch: int | None = None
    kind: ClassVar[str] = "move"

    def __post_init__(self) -> None:
        if not self.moves:
            raise ValueError("a move needs at least one key group")
        for group, subtask in self.moves:
            _positive_int("a key group", group, 0)
            _positive_int("a subtask", subtask, 0)
        if len({g for g, _ in self.moves}) != len(self.moves):
            raise ValueError("a key group can move to one subtask only")
        if self.batch is not None:
            _positive_int("batch", self.batch)

    @staticmethod
    def of(moves: Mapping[int, int], batch: int | None = None) -> Move:
        """`{key group: subtask}` as a move, in key-group order."""
        return Move(tuple(sorted(dict(moves).items())), batch)


@dataclass(frozen=True, slots=True)
class Query(Command[dict[str, Any]]):
    """The state of `key` in operator `uid`, by state name: `live` from the subtask that owns
    the key now (read-uncommitted), else from the last complete checkpoint (read-committed)."""

    uid: str
    key: Any
    live: bool = True
    kind: ClassVar[str] = "query"

    def __post_init__(self) -> None:
        if not isinstance(self.uid, str) or not self.uid:
            raise ValueError(f"a state query needs an operator uid, got {self.uid!r}")


@dataclass(frozen=True, slots=True)
class Patch(Command[int]):
    """Run `function` in operator `uid` from one checkpoint barrier on, keeping its state
    (`runtime.patches`); its result is that checkpoint."""

    uid: str
    function: Any
    kind: ClassVar[str] = "patch"

    def __post_init__(self) -> None:
        if not isinstance(self.uid, str) or not self.uid:
            raise ValueError(f"a patch needs an operator uid, got {self.uid!r}")
        if not callable(self.function) and not callable(getattr(self.function, "process_element", None)):
            raise ValueError(f"a patch needs a function (or a KeyedProcessFunction), got {self.function!r}")


@dataclass(frozen=True, slots=True)
class Resize(Command[int]):
    """Run operator `uid`'s function in `processes` processes per subtask from now on (vertical
    elasticity: `runtime.operators.function_pool`); its result is the new size."""

    uid: str
    processes: int
    kind: ClassVar[str] = "resize"

    def __post_init__(self) -> None:
        if not isinstance(self.uid, str) or not self.uid:
            raise ValueError(f"a resize needs an operator uid, got {self.uid!r}")
        _positive_int("processes", self.processes)


class Ticket(Generic[R]):
    """One command on its way: the job master finishes it once, the asker waits for it."""

    def __init__(self, command: Command[R]) -> None:
        self.command = command
        self._done = threading.Event()
        self._result: R | None = None
        self._error: BaseException | None = None

    def finish(self, result: R | None = None, error: BaseException | None = None) -> None:
        """Called by the job master once: the command's result, or why it failed."""
        self._result, self._error = result, error
        self._done.set()

    def fail(self, error: BaseException) -> None:
        self.finish(error=error)

    @property
    def is_done(self) -> bool:
        return self._done.is_set()

    def wait(self, timeout: float | None = None) -> R:
        """The result once done; raises the command's error, or TimeoutError."""
        if not self._done.wait(timeout):
            raise TimeoutError(f"{self.command.kind} not done after {timeout} s")
        if self._error is not None:
            raise self._error
        return self._result  # type: ignore[return-value]  # finished with a result of type R
