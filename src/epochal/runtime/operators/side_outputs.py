"""Side outputs in band: a tagged record rides in its operator's output batch until a split.

`ctx.output(tag, record)` in a user's function, and a join's late records, become `Tagged`
records of the operator's output batch, as a window operator's late records (`LateRecord`) and
an operator's dead letters (`DeadLetter`) do; `SideOutputOperator`s behind the operator keep
one tag each, unwrapped, and one keeps the main output (`plan.side_outputs`). An operator wraps
only the tags its spec says are read: an unread tag's records are dropped where they are made
(Flink's behaviour for a tag nobody asked for), so the main output never carries them.
"""

from __future__ import annotations

import logging
from typing import Any, NamedTuple

import pyarrow as pa

from ...plan.specs import SideOutputSpec
from ..wire.elements import Batch
from .base import RuntimeOperator

log = logging.getLogger(__name__)


class Tagged(NamedTuple):
    """A record sent to the side output `tag`."""

    tag: str
    record: Any


def tag_name(tag: Any) -> str:
    """The name of an `OutputTag` (or of a tag given by its name)."""
    name = getattr(tag, "name", tag)
    if not isinstance(name, str):
        raise TypeError(f"a side output's tag must be an OutputTag, got {tag!r}")
    return name


class SideOutputs:
    """Where an operator's functions send side-output records: `out`, the list the operator
    emits next, for the tags `read`; the others are counted and dropped."""

    __slots__ = ("read", "out", "dropped", "operator")

    def __init__(self, read: tuple[str, ...], operator: str) -> None:
        self.read = frozenset(read)
        self.out: list[Any] = []
        self.dropped = 0
        self.operator = operator

    def emit(self, tag: Any, record: Any) -> None:
        name = tag_name(tag)
        if name in self.read:
            self.out.append(Tagged(name, record))
            return
        if not self.dropped:
            log.debug("operator %r: side output %r is not read; its records are dropped", self.operator, name)
        self.dropped += 1

    def take(self) -> list[Any]:
        """The tagged records since the last call."""
        out, self.out = self.out, []
        return out


class OutputContext:
    """The context a process window function may take as a fourth argument
    (`process(key, window, records, ctx)`): side outputs and the operator's watermark."""

    __slots__ = ("_op",)

    def __init__(self, operator: Any) -> None:
        self._op = operator

    def output(self, tag: Any, record: Any) -> None:
        """Send `record` to the side output `tag` (an `OutputTag`)."""
        self._op.side.emit(tag, record)

    def current_watermark(self) -> float:
        return float(self._op.watermark)


def context_args(function: Any, operator: Any) -> tuple[Any, ...]:
    """`(OutputContext,)` for a process window function whose `process` takes a fourth
    parameter, else `()`: functions written for three arguments keep working."""
    import inspect

    try:
        parameters = inspect.signature(function.process).parameters.values()
    except (TypeError, ValueError):
        return ()
    positional = [p for p in parameters if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    variadic = any(p.kind is p.VAR_POSITIONAL for p in parameters)
    return (OutputContext(operator),) if len(positional) >= 4 or variadic else ()


def with_side(out: Batch | None, side: list[Any]) -> Batch | None:
    """An operator's output with its tagged records appended (an Arrow batch goes on as
    Python records when it carries any: a batch is one list or one Arrow batch)."""
    if not side:
        return out
    if out is None:
        return side
    if isinstance(out, pa.RecordBatch):
        from ..wire.batches import to_records

        return [*to_records(out), *side]
    out.extend(side)
    return out


class SideOutputOperator(RuntimeOperator):
    """Keeps the records of one side output, unwrapped, or (tag None) every record but them."""

    def __init__(self, spec: SideOutputSpec) -> None:
        super().__init__(spec)
        self.tag = spec.tag

    def process(self, batch: Batch) -> Batch | None:
        if type(batch) is not list:  # an Arrow batch carries no tagged records
            return batch if self.tag is None else None
        if self.tag is None:
            if Tagged not in map(type, batch):
                return batch
            return [r for r in batch if type(r) is not Tagged] or None
        tag = self.tag
        return [r.record for r in batch if type(r) is Tagged and r.tag == tag] or None


__all__ = ["OutputContext", "SideOutputOperator", "SideOutputs", "Tagged", "context_args", "tag_name", "with_side"]
