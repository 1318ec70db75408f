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
    """Raised when a user function fails on a record; names the operator and the record."""

    def __init__(self, operator: str, record: Any, cause: BaseException | None = None) -> None:
        self.operator = operator
        self.record = record
        self.cause = cause
        reason = f"{type(cause).__name__}: {cause}" if cause is not None else "failed"
        super().__init__(f"operator {operator!r} failed on record {_short_repr(record)}: {reason}")

    def __reduce__(self) -> tuple[Any, ...]:
        # Travels between processes (Spark workers to the driver): the record and the cause go
        # as they are when they pickle, else as text.
        return (_rebuild_operator_error, (type(self), self.operator, _picklable(self.record), _picklable(self.cause)))


def _picklable(value: Any) -> Any:
    import pickle

    try:
        pickle.dumps(value)
        return value
    except Exception:
        return _short_repr(value)


def _rebuild_operator_error(cls: type[OperatorError], operator: str, record: Any, cause: Any) -> OperatorError:
    err = cls.__new__(cls)
    err.operator, err.record = operator, record
    err.cause = cause if isinstance(cause, BaseException) or cause is None else None
    reason = f"{type(cause).__name__}: {cause}" if isinstance(cause, BaseException) else str(cause)
    Exception.__init__(err, f"operator {operator!r} failed on record {_short_repr(record)}: {reason}")
    return err


class KeySelectorError(OperatorError):
    """Raised when a key selector returns a value that has no stable hash (e.g. a list)."""


class JobFailedError(EpochalError):
    """Raised by `execute()` when a job fails and its restart budget is spent."""

    def __init__(self, job: str, attempts: int, cause: BaseException) -> None:
        self.job = job
        self.attempts = attempts
        self.cause = cause
        super().__init__(f"job {job!r} failed after {attempts} attempt(s): {cause}")


class CheckpointError(EpochalError):
    """Raised when checkpoint storage cannot be read or written."""


class CorruptCheckpointError(CheckpointError):
    """Raised when a checkpoint file fails its checksum or cannot be parsed."""


class NoCheckpointError(CheckpointError):
    """Raised when a job is asked to start from a checkpoint that does not exist."""


class InjectedFailure(EpochalError):
    """Raised on purpose by test helpers (`epochal.testing.Crash`) to exercise recovery."""
