"""Two-input operators as plan data: connected streams, broadcast state, and joins.

A two-input operator has two logical inputs, told apart by the edges that feed it
(`LogicalEdge.input`, `JobEdge.input`: 0 the first, 1 the second); its task aligns barriers over
the channels of both, takes the minimum of both watermarks, and ends once both inputs ended
(ABS §4.2, Algorithm 1 does not care which input a channel belongs to). Keyed two-input
operators route both inputs by key group with the same routing table, so both sides' state of a
key lives in that key's group, and moves, restores and rescales with it (dissertation §4.4).

Every spec here is plain data: key selectors (a function or a field name: an Arrow column or a
dict key), event time accessors (`plan.time.EventTime`: a field, Arrow columns read vectorized),
bounds in seconds, a join type, and the user's function, if any. A join's function is None (the
result is the pair `(left, right)`; `(left, None)` for a left record an outer join found no
match for; the left record itself in a semi join), a callable `fn(left, right)` returning one
record, or a `ProcessJoinFunction` (`process=True`) whose `process_element(left, right, ctx)`
returns or yields records (`right` is None for an unmatched left record, and in a semi join).

Columnar output: a join with no function may declare its output's Arrow schema
(`JoinOutput.schema`, its first `left_width` fields the left record's): each result is then one
row, the left record's fields followed by the right's (nulls for an unmatched left record; the
left's alone in a semi join), and the operator emits Arrow batches of that schema. A front end
that knows its inputs' schemas when it plans (SQL) gets columnar results without a function.

Late records: a join's records too late to be joined correctly go to its side outputs tagged
`LATE_TAGS[input]`, when the program reads them (`side_outputs` holds the tags read, as for any
side output: `plan.side_outputs`); otherwise they are counted (`OperatorMetrics.late_records`).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Any

from .specs import KeySelector, OnError, OperatorSpec
from .time import EventTime
from .windows import PeriodicWindow

# the side output tags of a join's late records, per input (reserved: they start with "__")
LATE_TAGS = ("__late_left__", "__late_right__")


class JoinType(Enum):
    """Which records a join emits."""

    INNER = "inner"  # the matched pairs only
    LEFT = "left"  # and each left record that found no match, as `(left, None)`
    SEMI = "semi"  # each left record that found a match, once (per window, in a window join)


@dataclass(frozen=True, slots=True)
class TwoInputSpec(OperatorSpec):
    """Marks an operator with two inputs: its task tells it which input a batch came from."""


@dataclass(frozen=True, slots=True)
class CoProcessSpec(TwoInputSpec):
    """A `CoProcessFunction` over two streams, not keyed: `process_element1` per record of the
    first input, `process_element2` per record of the second (co-map and co-flat-map are such
    functions). No keyed state and no timers, as in Flink."""

    function: Any
    on_error: OnError = OnError.FAIL
    side_outputs: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class KeyedCoProcessSpec(TwoInputSpec):
    """A `KeyedCoProcessFunction`: both inputs keyed (`keys[0]` the first's selector,
    `keys[1]` the second's) into shared keyed state and timers."""

    keys: tuple[KeySelector, KeySelector]
    function: Any
    on_error: OnError = OnError.FAIL
    side_outputs: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class BroadcastProcessSpec(TwoInputSpec):
    """A `BroadcastProcessFunction` (`key` None) or `KeyedBroadcastProcessFunction`: input 0 is
    the data stream, input 1 the broadcast stream, whose records every subtask receives and
    which alone may change the broadcast state `states` (names of maps)."""

    key: KeySelector | None
    function: Any
    states: tuple[str, ...]
    on_error: OnError = OnError.FAIL
    side_outputs: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class JoinInput:
    """One side of a join: its key selector and its event time (None: not on event time)."""

    key: KeySelector
    event_time: EventTime | None


@dataclass(frozen=True, slots=True)
class JoinOutput:
    """What a join emits: its type and its function (see the module docstring)."""

    how: JoinType = JoinType.INNER
    function: Any = None
    process: bool = False  # `function` is a ProcessJoinFunction
    schema: Any = None  # a pyarrow.Schema: results as Arrow rows of it (no function; module docstring)
    left_width: int = 0  # how many of `schema`'s fields are the left record's


def join_schema(left: Any, right: Any, how: JoinType) -> tuple[Any, int]:
    """The output schema of a columnar join of records of schemas `left` and `right`, and how
    many of its fields are the left's: the left's fields, then the right's (none in a semi
    join), a right field whose name the left has prefixed `right_`, every right field nullable
    in a left outer join."""
    import pyarrow as pa

    fields = list(left)
    if how is not JoinType.SEMI:
        taken = set(left.names)
        for field in right:
            name = f"right_{field.name}" if field.name in taken else field.name
            fields.append(pa.field(name, field.type, nullable=field.nullable or how is JoinType.LEFT))
    return pa.schema(fields), len(left)


@dataclass(frozen=True, slots=True)
class IntervalJoinSpec(TwoInputSpec):
    """Pairs `(l, r)` of equal keys with `l.t + lower <= r.t <= l.t + upper` (Flink's interval
    join; an end is open when not `*_inclusive`). A record is kept until the watermark passes
    the last time a record of the other side could match it."""

    left: JoinInput
    right: JoinInput
    lower: float
    upper: float
    lower_inclusive: bool = True
    upper_inclusive: bool = True
    output: JoinOutput = JoinOutput()
    on_error: OnError = OnError.FAIL
    side_outputs: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class WindowJoinSpec(TwoInputSpec):
    """Pairs of equal keys in the same window of `window` (tumbling or sliding), emitted when the
    watermark passes the window's end; each side's records are kept once per slice of the
    windows' shared slicing (dissertation §5.3.1), not once per window."""

    left: JoinInput
    right: JoinInput
    window: PeriodicWindow
    allowed_lateness: float = 0.0
    output: JoinOutput = JoinOutput()
    on_error: OnError = OnError.FAIL
    side_outputs: tuple[str, ...] = ()


class TemporalMode(Enum):
    """Which version of the table a temporal join's record meets."""

    EVENT_TIME = "event_time"  # the version valid at the record's event time
    ARRIVAL = "arrival"  # the newest version when the record arrives (a lookup join)


@dataclass(frozen=True, slots=True)
class TemporalJoinSpec(TwoInputSpec):
    """A stream (input 0) joined with a versioned table (input 1, each record a new version of
    its key, valid from its event time on), kept in keyed state."""

    left: JoinInput
    right: JoinInput
    mode: TemporalMode = TemporalMode.EVENT_TIME
    output: JoinOutput = JoinOutput()
    on_error: OnError = OnError.FAIL
    side_outputs: tuple[str, ...] = ()


JoinSpec = IntervalJoinSpec | WindowJoinSpec | TemporalJoinSpec

__all__ = [
    "LATE_TAGS", "BroadcastProcessSpec", "CoProcessSpec", "IntervalJoinSpec", "JoinInput", "JoinOutput",
    "JoinSpec", "JoinType", "KeyedCoProcessSpec", "join_schema", "TemporalJoinSpec", "TemporalMode", "TwoInputSpec",
    "WindowJoinSpec",
]
