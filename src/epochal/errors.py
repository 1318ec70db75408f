"""Every error Epochal raises, under one base class.

Lower-layer failures (OSError, pyarrow, Spark) are translated at the layer boundary into one of
these, so a caller needs to catch only `EpochalError`.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "EpochalError",
    "GraphError",
    "OperatorError",
    "RecordError",
    "KeySelectorError",
    "JobFailedError",
    "CheckpointError",
    "CorruptCheckpointError",
    "NoCheckpointError",
    "InjectedFailure",
]

_RECORD_REPR_LIMIT = 200


def _short_repr(value: Any) -> str:
    text = repr(value)
    if len(text) > _RECORD_REPR_LIMIT:
        text = text[: _RECORD_REPR_LIMIT - 3] + "..."
    return text


class EpochalError(Exception):
    """Base class of every error Epochal raises."""


class GraphError(EpochalError):
    """Raised when a stream program cannot be turned into a job graph (a cycle, a bad parallelism)."""


class OperatorError(EpochalError):
    """Raised when an operator fails on a record or in a step; names the operator and the record
    (or the step, as `<...>`), and where known the record's source position."""

    def __init__(
        self, operator: str, record: Any, cause: BaseException | None = None, position: Any = None
    ) -> None:
        self.operator = operator
        self.record = record
        self.cause = cause
        self.position = position
        reason = f"{type(cause).__name__}: {cause}" if cause is not None else "failed"
        super().__init__(_message(operator, record, reason, position))

    def __reduce__(self) -> tuple[Any, ...]:
        # Travels between processes (Spark workers to the driver): the record and the cause go
        # as they are when they pickle, else as text.
        return (
            _rebuild_operator_error,
            (type(self), self.operator, _picklable(self.record), _picklable(self.cause), _picklable(self.position)),
        )


def _message(operator: str, record: Any, reason: str, position: Any) -> str:
    where = f" ({describe_position(position)})" if position is not None else ""
    return f"operator {operator!r} failed on record {_short_repr(record)}{where}: {reason}"


def describe_position(position: Any) -> str:
    """A source position (`{"split", "from", "to"}`) in words."""
    if isinstance(position, dict) and "split" in position:
        start, end = position.get("from"), position.get("to")
        since = "its start" if start is None else f"position {start!r}"
        return f"split {position['split']!r}, in the batch read from {since} to position {end!r}"
    return str(position)


def _picklable(value: Any) -> Any:
    import pickle

    try:
        pickle.dumps(value)
        return value
    except Exception:
        return _short_repr(value)


def _rebuild_operator_error(
    cls: type[OperatorError], operator: str, record: Any, cause: Any, position: Any = None
) -> OperatorError:
    err = cls.__new__(cls)
    err.operator, err.record, err.position = operator, record, position
    err.cause = cause if isinstance(cause, BaseException) or cause is None else None
    reason = f"{type(cause).__name__}: {cause}" if isinstance(cause, BaseException) else str(cause)
    Exception.__init__(err, _message(operator, record, reason, position))
    return err


class RecordError(OperatorError):
    """Raised when user code fails on a record (or on a timer or a window it runs for).

    Such a failure usually recurs on every attempt, at the same record: its `fingerprint`
    (operator, record, exception type) lets the job master end a job whose consecutive attempts
    fail identically instead of spending the restart budget on it.
    """

    @property
    def fingerprint(self) -> tuple[str, str, str]:
        cause = type(self.cause).__name__ if self.cause is not None else ""
        return (self.operator, _short_repr(self.record), cause)


class KeySelectorError(RecordError):
    """Raised when a key selector fails on a record or returns a value that has no stable hash
    (e.g. a list)."""


class JobFailedError(EpochalError):
    """Raised by `execute()` when a job fails and its restart budget is spent, or when the same
    record fails identically on consecutive attempts (`recurring`)."""

    def __init__(self, job: str, attempts: int, cause: BaseException, recurring: bool = False) -> None:
        self.job = job
        self.attempts = attempts
        self.cause = cause
        self.recurring = recurring
        note = "; it failed the same way on consecutive attempts, so it was not restarted again" if recurring else ""
        if _record_error_in(cause) is not None:
            note += ('; to drop such records (counted) or send them to the job\'s dead-letter sink instead, build '
                     'the operator with on_error="skip" or on_error="dead_letter" (docs/bad-records.md)')
        super().__init__(f"job {job!r} failed after {attempts} attempt(s): {cause}{note}")


def _record_error_in(cause: BaseException | None) -> RecordError | None:
    """The user-code failure on a record behind `cause` (it, or what a host wrapped), if any."""
    for _ in range(8):
        if cause is None or isinstance(cause, RecordError):
            return cause
        cause = cause.__cause__
    return None


class JobCancelledError(EpochalError):
    """Raised by a job cancelled before it finished (`JobHandle.cancel()`, `epochal cancel`);
    nothing after its last complete checkpoint was committed."""

    def __init__(self, job: str) -> None:
        self.job = job
        super().__init__(f"job {job!r} was cancelled")


class CheckpointError(EpochalError):
    """Raised when checkpoint storage cannot be read or written."""


class CorruptCheckpointError(CheckpointError):
    """Raised when a checkpoint file fails its checksum or cannot be parsed."""


class NoCheckpointError(CheckpointError):
    """Raised when a job is asked to start from a checkpoint that does not exist."""


class InjectedFailure(EpochalError):
    """Raised on purpose by test helpers (`epochal.testing.Crash`) to exercise recovery."""
