"""Bad records: where a failed record came from, and how its dead letter travels.

An operator whose user code fails on a record applies its `OnError` policy
(`RuntimeOperator.reject`). Under `dead_letter` the record leaves as a `DeadLetter` at the end of
the operator's output batch: a side output carried in band, as a window operator's late records
are. The compiler put two splits behind such an operator (`plan.dead_letters`): one passes the
records on, the other sends the letters to the job's dead-letter sink, so they are committed with
the checkpoint that covers them, exactly once.

A dead letter is written as the dict `{"operator", "record", "error", "position"}`. The record is
kept as it is when JSON can hold it (None, bool, int, float, str, and lists, tuples and
str-keyed dicts of these), so a dead-letter file can be read back and replayed; anything else is
written as its `repr()`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

import pyarrow as pa

from ..wire.batches import to_records
from ..wire.elements import Batch

_JSON_SCALARS = (str, int, float, bool, type(None))
_JSON_DEPTH = 32


def json_value(value: Any) -> Any:
    """`value` if JSON can hold it as it is, else its `repr()`."""
    return value if _is_json(value, 0) else repr(value)


def _is_json(value: Any, depth: int) -> bool:
    kind = type(value)
    if kind in _JSON_SCALARS:
        return True
    if depth >= _JSON_DEPTH:
        return False
    if kind is list or kind is tuple:
        return all(_is_json(v, depth + 1) for v in value)
    if kind is dict:
        return all(type(k) is str and _is_json(v, depth + 1) for k, v in value.items())
    return False


@dataclass(slots=True)
class SourceOrigin:
    """Where the source batch this task is processing was read: a split and the source positions
    before and after it. The source sets it per batch; operators chained to the source read it
    when a record fails. Tasks without a source never set it: after a shuffle the batch a record
    came from is not known (knowing it would mean carrying a position with every record)."""

    split: str | None = None
    start: Any = None
    end: Any = None

    def at(self, split: str, start: Any, end: Any) -> None:
        self.split, self.start, self.end = split, start, end

    def position(self) -> dict[str, Any] | None:
        """`{"split", "from", "to"}`, or None where unknown."""
        if self.split is None:
            return None
        return {"split": self.split, "from": json_value(self.start), "to": json_value(self.end)}


class DeadLetter(NamedTuple):
    """A record user code failed on, under `on_error="dead_letter"`, on its way to the sink."""

    operator: str
    record: Any
    error: str
    position: dict[str, Any] | None

    @staticmethod
    def of(operator: str, record: Any, error: BaseException, position: dict[str, Any] | None) -> DeadLetter:
        return DeadLetter(operator, json_value(record), f"{type(error).__name__}: {error}", position)


def with_letters(out: Batch | None, letters: list[DeadLetter]) -> Batch | None:
    """An operator's output with its dead letters at the end; an Arrow batch that carries dead
    letters goes on as Python records (a batch is one list or one Arrow batch)."""
    if not letters:
        return out
    if out is None:
        return list(letters)
    records = to_records(out) if isinstance(out, pa.RecordBatch) else out
    return [*records, *letters]


def records_part(batch: Batch) -> Batch | None:
    """The batch without its dead letters."""
    if type(batch) is list and DeadLetter in map(type, batch):
        return [r for r in batch if type(r) is not DeadLetter] or None
    return batch


def dead_letters_part(batch: Batch) -> Batch | None:
    """The batch's dead letters, as the dicts the dead-letter sink writes."""
    if type(batch) is list and DeadLetter in map(type, batch):
        return [r._asdict() for r in batch if type(r) is DeadLetter]
    return None


__all__ = ["DeadLetter", "SourceOrigin", "dead_letters_part", "json_value", "records_part", "with_letters"]
