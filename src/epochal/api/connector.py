"""The contracts of sources and sinks.

A source must be *replayable* (dissertation §3.3.1.2, and §3.4.4.1, Algorithm 5): it is cut into a
deterministic list of splits, and a reader can resume a split from a position it reported, so a
restore rewinds to exactly the records after the checkpoint. A sink is written in two phases
(dissertation §4.1.3): `prepare_commit` at each checkpoint seals what was written since the last
one into a committable, and `Sink.commit` makes committables visible once the checkpoint is
complete. Commit must be idempotent: after a failure it may be called again for a committable
that was already committed.

Both have a `check` hook that the job master calls once, on the driver, before any task starts
(and before Spark does): a missing input or an output that would be written twice fails there,
in one line, instead of in every attempt of a running job.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from ..runtime.wire.elements import Batch


class SourceSplit(Protocol):
    """A part of a source's input; `split_id` is stable across runs."""

    @property
    def split_id(self) -> str: ...


@dataclass(frozen=True, slots=True)
class RejectedInput:
    """Input a reader stepped over because it does not parse: the raw record (a line), why,
    and where it was (e.g. `{"file": …, "byte": …}`)."""

    record: Any
    error: str
    position: Any


class SplitReader(ABC):
    """Reads one split from a position."""

    @abstractmethod
    def read(self, max_records: int) -> Batch | None:
        """Up to `max_records` records (a list or an Arrow batch), or None at the split's end.

        An empty batch means "nothing yet" (an unbounded source waiting for data): the task
        comes back after `retry_after()` seconds. Do not block here: the worker's other tasks
        wait meanwhile.
        """

    def retry_after(self) -> float:
        """After a read that returned nothing: seconds until there may be data. The task does
        not ask this reader again sooner, and when every split it reads is waiting it sleeps
        until the first is due, so an idle source costs no CPU. A reader that knows when data
        comes (a poll interval, a file's next check) says so; the default is 10 ms."""
        return 0.01

    @abstractmethod
    def position(self) -> Any:
        """Where to resume: just past the last record `read` returned (picklable)."""

    def notify_checkpoint_complete(self, checkpoint_id: int, position: Any) -> None:  # noqa: B027 - optional hook
        """Checkpoint `checkpoint_id`, which holds `position` for this split, completed: no
        restore of this job goes back before it, so a log may let go of what lies before it (a
        replication slot advances). Called on the reader's task, for the newest complete
        checkpoint only; never needed for recovery, which starts from the checkpoint's position."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release the split's resources."""

    def tolerate_bad_input(self) -> None:  # noqa: B027 - optional hook
        """Called once, after opening, when the job asked for bad input to be skipped or
        dead-lettered (`from_source(on_error=...)`): from then on a reader that can step over
        input that does not parse hands it out by `rejected()` instead of raising. A reader
        that cannot keeps raising, and the job fails as with `on_error="fail"`."""

    def rejected(self) -> list[RejectedInput]:
        """The input stepped over that the reads so far have passed (their position is past
        it), each once: a restore to a position before it rejects it again, as it re-reads it."""
        return []


T = TypeVar("T")  # a source's records


class Source(ABC, Generic[T]):
    """A replayable, bounded or unbounded input of records of type `T` (`Source[str]`; a source
    that does not say is `Source[Any]`): `env.from_source(source)` is a `DataStream[T]`."""

    @abstractmethod
    def splits(self) -> Sequence[SourceSplit]:
        """The source's splits, in the same order on every call and in every process."""

    @abstractmethod
    def open_split(self, split: SourceSplit, position: Any | None) -> SplitReader:
        """A reader of `split`, from `position` (None: from the start)."""

    def discovery_interval(self) -> float | None:
        """None (the default): `splits()` is fixed, and every source subtask lists it once.

        Seconds: the source finds splits as it runs (a watched directory). The job master calls
        `splits()` that often and hands each split it has not seen before to one source subtask,
        exactly once across failures and rescales; the source never ends on its own. `splits()`
        then returns every split there is now, each with the `split_id` it had before.
        """
        return None

    # True: a split may never end (a log's partition), so a subtask reads all of its splits at
    # once, a batch each in turn, instead of one after another
    endless_splits: bool = False

    def resumed(self, splits: Sequence[Any]) -> None:  # noqa: B027 - optional hook
        """A source that finds splits as it runs: the job resumed from a checkpoint whose split
        log holds `splits` (called on the job master before its first listing)."""

    def check(self) -> None:  # noqa: B027 - optional hook
        """Raise an `EpochalError` if the job cannot read this source (e.g. its input is missing).

        Called once on the driver before the job starts, so the mistake is reported in one line
        rather than by every attempt of the job; keep it cheap (no reading of the data).
        """


class SinkWriter(ABC):
    """Writes one sink subtask's records, staged until committed."""

    @abstractmethod
    def write(self, batch: Batch) -> None:
        """Stage a batch (a list or an Arrow batch); nothing may become visible yet."""

    def prepare_commit(self, checkpoint_id: int) -> Any:
        """Seal what was written since the last checkpoint; return a picklable committable, or None."""
        return None

    def recover(self) -> None:  # noqa: B027 - optional hook
        """Called after restore: discard staged data that no checkpoint covers."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release resources (uncommitted data is left for `recover` to clean up)."""


class Sink(ABC):
    """An output: a writer per subtask, and commits of what the writers prepared."""

    @abstractmethod
    def create_writer(self, subtask: int, parallelism: int) -> SinkWriter:
        """A writer for one subtask."""

    def commit(self, committables: list[Any]) -> None:  # noqa: B027 - sinks without 2PC
        """Make prepared data visible; idempotent, in checkpoint order."""

    def check(self, resuming: bool) -> None:  # noqa: B027 - optional hook
        """Raise an `EpochalError` if the job must not write here; called once on the driver.

        `resuming` is True when the job starts from a checkpoint or savepoint: output that the
        checkpoint's run committed is then expected, and must not be refused. On a fresh start,
        a sink that already holds committed output should refuse (unless told to overwrite or
        append), since a new run cannot know what the old one committed and would write it all
        again. Also the place to fail early on a target that is not writable. A sink told to
        overwrite clears its own old output here, once, before any writer exists.
        """
