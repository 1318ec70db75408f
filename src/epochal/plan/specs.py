"""What each operator of a job is: the data the runtime builds running operators from.

The runtime executes only these core operators (after Bytewax and Timely: a small core, with the
friendly operators of `epochal.api` composed on top). Every spec carries a `name`, unique in the
job and shown in every error, and a `uid` that names its state in checkpoints.

Key selectors are either a callable or a field name (a column of an Arrow batch, or an item of a
dict record). Every operator that runs user code has an `on_error` policy (`OnError`): what
happens to a record its code fails on.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import Any, Literal

from ..state.keygroups import stable_hash
from .time import EventTime, WatermarkSpec
from .triggers import Trigger, WindowTime

KeySelector = Callable[[Any], Any] | str
# When a keyed aggregation emits: one update per record, or the newest value of each key that
# changed, once per epoch, just before the checkpoint's barrier (Flink's mini-batch, Spark's update mode)
Emit = Literal["per_record", "on_checkpoint"]
EMITS = ("per_record", "on_checkpoint")


class OnError(Enum):
    """What an operator does with a record its user code fails on (docs/bad-records.md)."""

    FAIL = "fail"  # the attempt fails, naming the operator, the record and its source position
    SKIP = "skip"  # the record is dropped and counted (`OperatorMetrics.skipped_records`)
    DEAD_LETTER = "dead_letter"  # the record goes to the job's dead-letter sink, exactly once


@dataclass(frozen=True, slots=True)
class OperatorSpec:
    name: str
    uid: str


@dataclass(frozen=True, slots=True)
class SourceSpec(OperatorSpec):
    """Reads a replayable source (an `epochal.Source`), generating watermarks if asked to."""

    source: Any
    watermarks: WatermarkSpec | None = None
    on_error: OnError = OnError.FAIL  # for the input its readers reject (`SplitReader.rejected`)


class RecordFnKind(Enum):
    MAP = "map"
    FILTER = "filter"
    FLAT_MAP = "flat_map"
    KEY_CHECK = "key_check"  # a filter by `KeyCheck`: Arrow batches keyed by a present column pass whole


@dataclass(frozen=True, slots=True)
class KeyCheck:
    """The predicate of `key_by(key, on_error=...)`: true for a record whose key the selector
    returns and has a stable hash; raises for any other, so the check's policy applies before
    the records are partitioned by key."""

    key: KeySelector

    def __call__(self, record: Any) -> bool:
        key = self.key
        stable_hash(record[key] if isinstance(key, str) else key(record))
        return True


@dataclass(frozen=True, slots=True)
class RecordFnSpec(OperatorSpec):
    """A stateless function applied per record."""

    kind: RecordFnKind
    fn: Callable[[Any], Any]
    on_error: OnError = OnError.FAIL
    processes: int = 0  # > 0: the function runs in a pool of that many processes (`function_pool`)


@dataclass(frozen=True, slots=True)
class AsyncMapSpec(OperatorSpec):
    """An async function per record on the worker's event loop, at most `capacity` in flight
    per subtask, each given `timeout` seconds (None: no limit); results in input order
    (`ordered`) or as they complete (Flink's AsyncWaitOperator)."""

    function: Any  # a `plan.functions.AsyncFunction`, or a coroutine function
    capacity: int = 100
    timeout: float | None = 5.0
    ordered: bool = True
    on_error: OnError = OnError.FAIL


@dataclass(frozen=True, slots=True)
class MapBatchesSpec(OperatorSpec):
    """A stateless function applied per batch, as a `pyarrow.RecordBatch` (the columnar path).
    `event_time`: where the records' event time is from here on (a column `fn` outputs; the SQL
    layer's aggregates over a window's output); watermarks pass on unchanged, or held at the start
    of their `watermark_tick` (the SQL layer's GROUP BY on the event-time column: the window
    operator ahead closes its groups by windows of that length, and a group's row, whose time is
    its own, goes out only when the watermark passes its window's end)."""

    fn: Callable[[Any], Any]
    on_error: OnError = OnError.FAIL
    event_time: EventTime | None = None
    watermark_tick: float | None = None


@dataclass(frozen=True, slots=True)
class KeyedReduceSpec(OperatorSpec):
    """Rolling reduce per key; emits the new reduced value per record, or per changed key at
    each checkpoint (`emit="on_checkpoint"`). `combine`: reduce locally before the key exchange
    too (`plan.local_global`; `fn` must be associative). Count, sum and the other aggregates are
    `plan.aggregates.KeyedAggregateSpec`."""

    key: KeySelector
    fn: Callable[[Any, Any], Any]
    on_error: OnError = OnError.FAIL
    emit: Emit = "per_record"
    combine: bool = False


# What a keyed process function's processing-time timers still pending at the end of its input
# do: fire (as if the clock reached the last of them), or go to `on_end_of_input` unfired
TimersAtEnd = Literal["fire", "report"]
TIMERS_AT_END = ("fire", "report")


@dataclass(frozen=True, slots=True)
class KeyedProcessSpec(OperatorSpec):
    """A keyed process function with keyed state and processing-time timers."""

    key: KeySelector
    function: Any
    on_error: OnError = OnError.FAIL
    timers_at_end: TimersAtEnd = "report"
    side_outputs: tuple[str, ...] = ()  # the tags read with `side_output` (`plan.side_outputs`)


@dataclass(frozen=True, slots=True)
class UnionSpec(OperatorSpec):
    """Merges its inputs; records pass unchanged."""


@dataclass(frozen=True, slots=True)
class AssignTimestampsSpec(OperatorSpec):
    """Generates watermarks from the records passing through; upstream watermarks stop here."""

    watermarks: WatermarkSpec
    on_error: OnError = OnError.FAIL


class WindowFunctionKind(Enum):
    """What a window computes from its records."""

    COUNT = "count"
    SUM = "sum"
    MIN = "min"
    MAX = "max"
    REDUCE = "reduce"
    AGGREGATE = "aggregate"  # an AggregateFunction with merge
    PROCESS = "process"  # a ProcessWindowFunction over the window's records


@dataclass(frozen=True, slots=True)
class KeyedWindowSpec(OperatorSpec):
    """Window aggregation per key on shared slices (dissertation ch. 5, Cutty).

    `queries` are `(name, window definition)` pairs (`plan.windows`); with `named` false there is
    one, and results do not name it. `value` says what the aggregate reads of a record: None (the
    record), a field name, or a function. `function` is the user's reduce function, aggregate
    function or process window function. Late records go to the operator's output wrapped in
    `LateRecord` when `emit_late` is set (`late_records()` asked for them), else they are counted.
    Outside event time (`time`) and with a `trigger` other than the default, the operator runs its
    records one at a time (`runtime/operators/window_triggers.py`).

    `combine`: pre-aggregate per key and slice before the key exchange (`plan.local_global`,
    `plan.aggregates.LocalWindowSpec`); `combined`: the input is those partials.
    """

    key: KeySelector
    queries: tuple[tuple[str, Any], ...]
    kind: WindowFunctionKind
    event_time: EventTime | None  # None outside event time
    value: Any = None
    function: Any = None
    allowed_lateness: float = 0.0
    named: bool = False
    emit_late: bool = False
    on_error: OnError = OnError.FAIL
    time: WindowTime = WindowTime.EVENT  # event, processing or count (`plan.triggers`)
    trigger: Trigger | None = None  # None: fire when the watermark (or clock) passes the end
    keyless: bool = False  # `window_all`: one key for every record, left out of the results
    side_outputs: tuple[str, ...] = ()  # tags a process window function's records go to
    combine: bool = False  # a local phase (partials per key and slice) before the key exchange
    combined: bool = False  # what arrives are such partials (`plan.local_global`)


class OutputPart(Enum):
    """A part of an operator's output: side outputs travel in it, wrapped, until split off."""

    RESULTS = "results"  # a window operator's results (neither late records nor dead letters)
    LATE = "late"  # a window operator's late records, unwrapped
    RECORDS = "records"  # everything but dead letters
    DEAD_LETTERS = "dead_letters"  # the dead letters, as the records the dead-letter sink writes


@dataclass(frozen=True, slots=True)
class SplitLateSpec(OperatorSpec):
    """Keeps one part of an operator's output: a window operator's results or late records, or
    the records or dead letters of an operator with `on_error=DEAD_LETTER` (`plan.dead_letters`)."""

    part: OutputPart


@dataclass(frozen=True, slots=True)
class SideOutputSpec(OperatorSpec):
    """Keeps one side output of the operator before it (`ctx.output(tag, record)`), unwrapped, or
    with `tag` None its main output: every record but the side outputs (`plan.side_outputs`)."""

    tag: str | None


@dataclass(frozen=True, slots=True)
class IterationHeadSpec(OperatorSpec):
    """The head of a loop: merges the loop's input with its feedback; records pass unchanged.

    Its task consumes the loop's back-edges and logs them during checkpoints (ABS §4.3,
    Algorithm 2); `feedback_threshold` batches of buffered feedback make it read feedback only
    (dissertation §6.4.3.2), so a heavy loop cannot deadlock on full channels. With
    `event_time`, the head holds the watermark until the loop holds nothing older
    (`runtime.task.loop_clock`).
    """

    feedback_threshold: int = 8
    event_time: EventTime | None = None


@dataclass(frozen=True, slots=True)
class SinkSpec(OperatorSpec):
    """Writes to a sink (an `epochal.Sink`), committing per checkpoint if the sink is transactional."""

    sink: Any


class PartitionKind(Enum):
    FORWARD = "forward"
    REBALANCE = "rebalance"
    BROADCAST = "broadcast"
    KEY_GROUP = "key_group"


@dataclass(frozen=True, slots=True)
class Partitioning:
    """How records cross an edge: to the same subtask, round robin, to all, or by key group."""

    kind: PartitionKind
    key: KeySelector | None = None

    def __post_init__(self) -> None:
        if (self.kind is PartitionKind.KEY_GROUP) != (self.key is not None):
            raise ValueError("a key selector goes with key-group partitioning, and only there")


FORWARD = Partitioning(PartitionKind.FORWARD)
REBALANCE = Partitioning(PartitionKind.REBALANCE)
BROADCAST = Partitioning(PartitionKind.BROADCAST)
