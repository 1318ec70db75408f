"""What a launcher (`epochal run`, `epochal serve`) imposes on every environment a job file
creates: the job file stays the one a user runs by hand, and the launcher changes where and how
it runs without editing it."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Literal

from ..runtime.result import JobProgress, JobResult
from ..validation import check_bool, check_callable, check_choice, check_int, check_name, check_path

Executor = Literal["inprocess", "spark"]
EXECUTORS: tuple[Executor, ...] = ("inprocess", "spark")


@dataclass(frozen=True, slots=True)
class RunOverrides:
    """Settings a launcher (`epochal run`) imposes on every environment a job file creates."""

    parallelism: int | None = None
    checkpoint_directory: str | None = None
    from_checkpoint: str | None = None
    progress: Callable[[JobProgress], None] | None = None
    executor: Executor | None = None
    allow_non_restored_state: bool = False
    web_port: int | None = None
    on_result: Callable[[JobResult], None] | None = None  # told of every job that finished
    spark: Any = None  # the SparkSession of environments that name none (`epochal serve`'s)

    def __post_init__(self) -> None:
        if self.parallelism is not None:
            check_int("parallelism", self.parallelism)
        if self.checkpoint_directory is not None:
            directory = check_path("checkpoint_directory", self.checkpoint_directory)
            object.__setattr__(self, "checkpoint_directory", directory)
        if self.from_checkpoint is not None:
            check_name("from_checkpoint", self.from_checkpoint)
        if self.progress is not None:
            check_callable("progress", self.progress)
        if self.executor is not None:
            check_choice("executor", self.executor, EXECUTORS)
        check_bool("allow_non_restored_state", self.allow_non_restored_state)
        if self.web_port is not None:
            check_int("web_port", self.web_port, minimum=0)
        if self.on_result is not None:
            check_callable("on_result", self.on_result)


_overrides: RunOverrides | None = None


@contextmanager
def run_overrides(overrides: RunOverrides) -> Iterator[None]:
    """Apply `overrides` to the environments created and executed inside the block."""
    global _overrides
    previous, _overrides = _overrides, overrides
    try:
        yield
    finally:
        _overrides = previous


def current_overrides() -> RunOverrides | None:
    """The overrides of the innermost `run_overrides` block, if any."""
    return _overrides
