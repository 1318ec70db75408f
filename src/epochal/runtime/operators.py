"""The running operators: one class per core operator spec of `plan.specs`.

An operator turns one input batch into at most one output batch (`process`), so a chain of
operators in one task is a loop of function calls. Keyed operators keep their state in a
`HeapKeyedStateBackend`; sources keep split positions and sinks their prepared commits as
operator state (dissertation §2.2.1, Keyed-State vs Operator-State, L772–787).

Every user function is called inside a guard that turns its exception into an `OperatorError`
naming this operator and the record.
"""

from __future__ import annotations

import contextlib
import copy
import heapq
import itertools
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Iterator

import numpy as np
import pyarrow as pa

from ..errors import OperatorError
from ..plan.specs import (
    IterationHeadSpec,
    KeyedCountSpec,
    KeyedProcessSpec,
    KeyedReduceSpec,
    MapBatchesSpec,
    OperatorSpec,
    RecordFnKind,
    RecordFnSpec,
    SinkSpec,
    SourceSpec,
    UnionSpec,
)
from ..config import StateConfig
from ..state.backend import HeapKeyedStateBackend, KeyedStateSnapshot
from ..state.handles import ListState, MapState, ValueState
from ..state.keygroups import KeyGroupRange
from .batches import batch_len, to_arrow, to_records
from .clock import Clock
from .elements import Batch
from .columnar_count import ColumnarCounts
from .key_index import KeyIndex
from .keys import batch_keys, encode_key_column, key_groups_of_column, key_groups_of_records, record_key_fn


@dataclass(frozen=True, slots=True)
class OperatorContext:
    """Where a running operator sits: its subtask, its key groups, and the clock."""

    subtask: int
    parallelism: int
    max_parallelism: int
    key_groups: KeyGroupRange
    clock: Clock
    state: StateConfig = StateConfig()
    name: str = ""  # the task's name, for the disk backend's working directory


@dataclass(frozen=True, slots=True)
class OperatorSnapshot:
    """The fixed state of one operator of one subtask; serialised off the processing path."""

    keyed: KeyedStateSnapshot | None = None
    state: Any = None


class RuntimeOperator:
    """Base of the running operators; the defaults are those of a stateless operator."""

    def __init__(self, spec: OperatorSpec) -> None:
        self.name = spec.name
        self.uid = spec.uid

    def open(self, ctx: OperatorContext) -> None:
        self.ctx = ctx

    def process(self, batch: Batch) -> Batch | None:
        return batch

    def end_input(self) -> Batch | None:
        return None

    def next_timer(self) -> float | None:
        return None

    def on_processing_time(self, now: float) -> Batch | None:
        return None

    def snapshot(self, checkpoint_id: int) -> OperatorSnapshot:
        return OperatorSnapshot()

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        pass

    def restore(self, keyed: dict[int, dict[str, dict[Any, Any]]] | None, states: list[Any]) -> None:
        """Load state; `states` holds the operator state of *every* old subtask (union list)."""

    def close(self) -> None:
        pass


# ------------------------------------------------------------------------------------------------
# sources and sinks


@dataclass(slots=True)
class SourcePositions:
    """Operator state of a source subtask: how far each of its splits has been read."""

    positions: dict[str, Any] = field(default_factory=dict)
    finished: set[str] = field(default_factory=set)


class SourceOperator(RuntimeOperator):
    """Reads the splits of a replayable source assigned to this subtask, one after another.

    Split `i` of the source's deterministic split list belongs to subtask `i % parallelism`; a
    split's position points just past the last record handed out (dissertation L2366–2408:
    source state is an offset into a replayable log), so a restore rewinds exactly.
    """

    def __init__(self, spec: SourceSpec) -> None:
        super().__init__(spec)
        self.source = spec.source
        self._state = SourcePositions()
        self._splits: list[Any] = []
        self._reader: Any = None
        self._current: Any = None

    def open(self, ctx: OperatorContext) -> None:
        super().open(ctx)
        with _guard(self.name, "<listing the source's splits>"):
            splits = list(self.source.splits())
        self._splits = [s for i, s in enumerate(splits) if i % ctx.parallelism == ctx.subtask]

    def restore(self, keyed: Any, states: list[Any]) -> None:
        for old in states:  # union: positions of splits this subtask now owns, whoever read them
            if old is None:
                continue
            self._state.positions.update(old.positions)
            self._state.finished |= old.finished

    @property
    def is_exhausted(self) -> bool:
        return self._reader is None and self._next_split() is None

    def _next_split(self) -> Any:
        for split in self._splits:
            if split.split_id not in self._state.finished:
                return split
        return None

    def poll(self, max_records: int) -> Batch | None:
        """The next batch, or None once every split of this subtask is exhausted."""
        while True:
            if self._reader is None:
                split = self._next_split()
                if split is None:
                    return None
                self._current = split
                with _guard(self.name, f"<opening split {split.split_id}>"):
                    self._reader = self.source.open_split(split, self._state.positions.get(split.split_id))
            try:
                batch = self._reader.read(max_records)
            except OperatorError:
                raise
            except Exception as exc:
                raise OperatorError(self.name, f"<split {self._current.split_id}>", exc) from exc
            if batch is not None:
                self._state.positions[self._current.split_id] = self._reader.position()
                return batch
            self._state.finished.add(self._current.split_id)
            self._state.positions.pop(self._current.split_id, None)
            self._reader.close()
            self._reader = None

    def snapshot(self, checkpoint_id: int) -> OperatorSnapshot:
        return OperatorSnapshot(
            state=SourcePositions(dict(self._state.positions), set(self._state.finished))
        )

    def close(self) -> None:
        if self._reader is not None:
            self._reader.close()
            self._reader = None


class SinkOperator(RuntimeOperator):
    """Writes to a sink in two phases (dissertation §4.1.3, L3059–3155, and L3217–3252).

    Pre-commit at a checkpoint: the writer seals what it wrote since the last one into a
    *committable*, kept as operator state. Commit on the coordinator's notification that the
    checkpoint is complete. Committables found in restored state belong to a complete checkpoint
    and are committed on restore, so commits cut short by a failure are finished, once.
    """

    def __init__(self, spec: SinkSpec) -> None:
        super().__init__(spec)
        self.sink = spec.sink
        self._pending: dict[int, Any] = {}
        self._writer: Any = None

    def open(self, ctx: OperatorContext) -> None:
        super().open(ctx)
        with _guard(self.name, "<creating the writer>"):
            self._writer = self.sink.create_writer(ctx.subtask, ctx.parallelism)

    def process(self, batch: Batch) -> None:
        try:
            self._writer.write(batch)
        except Exception as exc:
            raise OperatorError(self.name, f"<batch of {batch_len(batch)} records>", exc) from exc
        return None

    def snapshot(self, checkpoint_id: int) -> OperatorSnapshot:
        with _guard(self.name, f"<preparing the commit of checkpoint {checkpoint_id}>"):
            committable = self._writer.prepare_commit(checkpoint_id)
        if committable is not None:
            self._pending[checkpoint_id] = committable
        # nothing pending: no state, and no file (restore treats None and {} alike)
        return OperatorSnapshot(state=dict(self._pending) if self._pending else None)

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        ready = [cid for cid in sorted(self._pending) if cid <= checkpoint_id]
        if ready:
            with _guard(self.name, f"<committing checkpoint(s) {ready}>"):
                self.sink.commit([self._pending[cid] for cid in ready])
            for cid in ready:
                del self._pending[cid]

    def restore(self, keyed: Any, states: list[Any]) -> None:
        # Old subtask j's commits go to subtask j % parallelism: the same subtask when the
        # parallelism is unchanged, so no other subtask touches its staged data meanwhile.
        mine = [
            c
            for j, old in enumerate(states)
            if old and j % self.ctx.parallelism == self.ctx.subtask
            for _, c in sorted(old.items())
        ]
        with _guard(self.name, "<committing restored checkpoints>"):
            if mine:
                self.sink.commit(mine)
            self._writer.recover()

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()


# ------------------------------------------------------------------------------------------------
# stateless


class RecordFnOperator(RuntimeOperator):
    """map, filter and flat_map: a user function per record."""

    def __init__(self, spec: RecordFnSpec) -> None:
        super().__init__(spec)
        self.fn = spec.fn
        self.kind = spec.kind

    def process(self, batch: Batch) -> Batch | None:
        fn = self.fn
        out: list[Any] = []
        record = None
        try:
            if self.kind is RecordFnKind.MAP:
                append = out.append
                for record in to_records(batch):
                    append(fn(record))
            elif self.kind is RecordFnKind.FILTER:
                append = out.append
                for record in to_records(batch):
                    if fn(record):
                        append(record)
            else:
                extend = out.extend
                for record in to_records(batch):
                    extend(fn(record))
        except Exception as exc:
            raise OperatorError(self.name, record, exc) from exc
        return out


class MapBatchesOperator(RuntimeOperator):
    """A user function per batch, handed a `pyarrow.RecordBatch`."""

    def __init__(self, spec: MapBatchesSpec) -> None:
        super().__init__(spec)
        self.fn = spec.fn

    def process(self, batch: Batch) -> Batch | None:
        try:
            arrow = to_arrow(batch)
        except Exception as exc:
            raise OperatorError(self.name, _batch_repr(batch), exc) from exc
        try:
            result = self.fn(arrow)
        except Exception as exc:
            raise OperatorError(self.name, _batch_repr(arrow), exc) from exc
        if isinstance(result, pa.Table):
            result = result.combine_chunks()
            batches = result.to_batches()
            return batches[0] if batches else None
        if result is None or isinstance(result, (pa.RecordBatch, list)):
            return result
        raise OperatorError(
            self.name,
            f"<batch of {arrow.num_rows} rows>",
            TypeError(f"map_batches function returned {type(result).__name__}, not a RecordBatch"),
        )


class UnionOperator(RuntimeOperator):
    """Records of every input pass unchanged."""


@dataclass(frozen=True, slots=True)
class LoopLog:
    """Operator state of a loop head: the feedback it logged during one checkpoint (ABS §4.3)."""

    batches: tuple[Any, ...]

    @property
    def records(self) -> int:
        return sum(batch_len(b) for b in self.batches)


class IterationHeadOperator(RuntimeOperator):
    """A loop's head: passes records on; its task logs feedback during checkpoints.

    On restore it holds the logged feedback of its checkpoint in `replay`, which the task feeds
    back into the loop before any new input ("restore states, replay the loop logs, then new
    input"). Logs of old subtask j go to subtask j % parallelism, like sink commits.
    """

    def __init__(self, spec: IterationHeadSpec) -> None:
        super().__init__(spec)
        self.feedback_threshold = spec.feedback_threshold
        self.replay: list[Any] = []

    def restore(self, keyed: Any, states: list[Any]) -> None:
        for j, old in enumerate(states):
            if old is not None and j % self.ctx.parallelism == self.ctx.subtask:
                self.replay.extend(old.batches)


# ------------------------------------------------------------------------------------------------
# keyed


def create_backend(ctx: OperatorContext, uid: str) -> Any:
    """The keyed-state backend `ctx.state` asks for: memory (dicts) or disk (RocksDB)."""
    config = ctx.state
    options = dict(
        incremental=config.incremental, compact_every=config.compact_every, compact_ratio=config.compact_ratio
    )
    if config.backend == "disk":
        from ..state.disk import DiskKeyedStateBackend

        return DiskKeyedStateBackend(
            ctx.key_groups, ctx.max_parallelism, local_dir=config.local_dir, label=f"{uid}-{ctx.subtask}", **options
        )
    return HeapKeyedStateBackend(ctx.key_groups, ctx.max_parallelism, **options)


class KeyedOperator(RuntimeOperator):
    """An operator whose state is keyed, held in the key groups of its subtask."""

    def open(self, ctx: OperatorContext) -> None:
        super().open(ctx)
        self.backend = create_backend(ctx, self.uid)

    def snapshot(self, checkpoint_id: int) -> OperatorSnapshot:
        return OperatorSnapshot(keyed=self.backend.snapshot(checkpoint_id))

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        self.backend.notify_checkpoint_complete(checkpoint_id)

    def restore(self, keyed: dict[int, dict[str, dict[Any, Any]]] | None, states: list[Any]) -> None:
        if keyed:
            self.backend.restore(keyed)

    def close(self) -> None:
        backend = getattr(self, "backend", None)
        if backend is not None:
            backend.close()


_COUNT = "count"
_INT16_MAX = int(np.iinfo(np.int16).max)


class KeyedCountOperator(KeyedOperator):
    """Running count per key, emitting `(key, count)` for every record.

    On an Arrow batch keyed by a column the whole update is vectorized: each distinct key's
    count moves once, in numpy (`ColumnarCounts`, on the heap backend), and each row's running
    count is the key's previous count plus the row's rank among the rows of its key, so the
    output is the same record for record as the per-record path, whatever the batch boundaries.
    """

    def __init__(self, spec: KeyedCountSpec) -> None:
        super().__init__(spec)
        self.key = spec.key
        self._key_fn = record_key_fn(spec.key)
        self._columnar: ColumnarCounts | None = None

    def process(self, batch: Batch) -> Batch | None:
        if isinstance(batch, pa.RecordBatch) and isinstance(self.key, str):
            return self._process_arrow(batch)
        self._flush_columnar(drop=True)  # records read and write the backend directly
        records = to_records(batch)
        keys, groups = key_groups_of_records(records, self._key_fn, self.ctx.max_parallelism, self.name)
        out: list[Any] = []
        try:
            self.backend.count_into(out, _COUNT, keys, groups)
        except Exception as exc:  # e.g. a restored count that is not a number
            raise OperatorError(self.name, records[len(out)], exc) from exc
        return out

    def _process_arrow(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        assert isinstance(self.key, str)
        distinct, indices = encode_key_column(batch, self.key, self.name)
        per_key = np.bincount(indices, minlength=len(distinct))
        base = self._add_counts(distinct, per_key)
        # The rows grouped by key, in arrival order within a key (a stable sort; numpy sorts
        # 16-bit integers by radix, in linear time: ~9x faster than int32). The p-th row of
        # that order, of key k, is row p - start[k] of its key: its count is base[k] + 1 + that.
        narrow = indices.astype(np.int16) if len(distinct) <= _INT16_MAX else indices
        order = np.argsort(narrow, kind="stable")
        offset = base + 1
        offset[1:] -= np.cumsum(per_key)[:-1]
        grouped = np.repeat(offset, per_key)
        grouped += np.arange(len(indices))
        counts = np.empty(len(indices), dtype=np.int64)
        counts[order] = grouped
        return pa.RecordBatch.from_arrays(
            [batch.column(self.key), pa.array(counts, pa.int64())], names=[self.key, "count"]
        )

    def _add_counts(self, distinct: pa.Array, per_key: np.ndarray) -> np.ndarray:
        """Add each distinct key's rows to its count; returns the counts before."""
        columnar = self._columnar
        if columnar is not None and not columnar.accepts(distinct.type):
            self._flush_columnar(drop=True)
            columnar = None
        if columnar is None and KeyIndex.supports(distinct.type) and isinstance(self.backend, HeapKeyedStateBackend):
            columnar = self._columnar = ColumnarCounts(distinct.type, self.backend, _COUNT)
        if columnar is not None:
            return columnar.add(distinct, per_key)
        # other key types, and the disk backend (whose state need not fit in memory): per key
        assert isinstance(self.key, str)
        groups = key_groups_of_column(distinct, self.key, self.ctx.max_parallelism, self.name)
        base = np.empty(len(distinct), dtype=np.int64)
        backend = self.backend
        for i, (key, kg) in enumerate(zip(distinct.to_pylist(), groups.tolist())):
            backend.set_current_key(key, kg)
            previous = backend.get(_COUNT, 0)
            base[i] = previous
            backend.put(_COUNT, previous + int(per_key[i]))
        return base

    def _flush_columnar(self, drop: bool = False) -> None:
        if self._columnar is not None:
            self._columnar.flush()
            if drop:
                self._columnar = None

    def snapshot(self, checkpoint_id: int) -> OperatorSnapshot:
        self._flush_columnar()
        return super().snapshot(checkpoint_id)

    def restore(self, keyed: dict[int, dict[str, dict[Any, Any]]] | None, states: list[Any]) -> None:
        self._columnar = None
        super().restore(keyed, states)


class KeyedReduceOperator(KeyedOperator):
    """Rolling reduce per key: emits the new reduced value for every record."""

    def __init__(self, spec: KeyedReduceSpec) -> None:
        super().__init__(spec)
        self.fn = spec.fn
        self.key = spec.key

    def process(self, batch: Batch) -> Batch | None:
        records, keys, groups = batch_keys(batch, self.key, self.ctx.max_parallelism, self.name)
        out: list[Any] = []
        try:
            self.backend.reduce_into(out, "reduce", records, keys, groups, self.fn)
        except Exception as exc:
            raise OperatorError(self.name, records[len(out)], exc) from exc
        return out


_TIMERS = "__timers__"


class ProcessContext:
    """What a keyed process function sees: the current key, its state, and timers.

    Passed to `open()` (register state there) and to every `process_element` / `on_timer` call.
    """

    def __init__(self, operator: "KeyedProcessOperator") -> None:
        self._op = operator
        self._backend = operator.backend
        self._states: dict[str, Any] = {}

    @property
    def key(self) -> Any:
        """The key of the record (or timer) being processed."""
        return self._backend.current_key

    @property
    def subtask(self) -> int:
        return self._op.ctx.subtask

    def _register(self, name: str, handle: Any) -> Any:
        if name.startswith("__"):
            raise ValueError(f"state names starting with '__' are reserved: {name!r}")
        existing = self._states.get(name)
        if existing is not None and type(existing) is not type(handle):
            raise ValueError(f"state {name!r} is already registered as {type(existing).__name__}")
        self._states[name] = handle
        return handle

    def value_state(self, name: str, default: Any = None) -> ValueState[Any]:
        """Register (or fetch) the keyed value state `name`."""
        return self._register(name, ValueState(self._backend, name, default))

    def list_state(self, name: str) -> ListState[Any]:
        """Register (or fetch) the keyed list state `name`."""
        return self._register(name, ListState(self._backend, name))

    def map_state(self, name: str) -> MapState[Any, Any]:
        """Register (or fetch) the keyed map state `name`."""
        return self._register(name, MapState(self._backend, name))

    def current_processing_time(self) -> float:
        return self._op.ctx.clock.now()

    def register_processing_time_timer(self, timestamp: float) -> None:
        """Call `on_timer(timestamp, ctx)` for the current key once processing time reaches it."""
        self._op.register_timer(float(timestamp))

    def delete_processing_time_timer(self, timestamp: float) -> None:
        self._op.delete_timer(float(timestamp))


class KeyedProcessOperator(KeyedOperator):
    """A user's keyed process function, with keyed state and processing-time timers.

    Timers are keyed state (a tuple of timestamps per key), so they are checkpointed with the
    key group they belong to; the heap that orders them is rebuilt on restore.
    """

    def __init__(self, spec: KeyedProcessSpec) -> None:
        super().__init__(spec)
        self.function = spec.function
        self.key = spec.key
        self._heap: list[tuple[float, int, int, Any]] = []
        self._seq = itertools.count()

    def open(self, ctx: OperatorContext) -> None:
        super().open(ctx)
        self.pctx = ProcessContext(self)
        opener = getattr(self.function, "open", None)
        if opener is not None:
            try:
                opener(self.pctx)
            except Exception as exc:
                raise OperatorError(self.name, "<open>", exc) from exc

    # -- timers ----------------------------------------------------------------------------------
    def register_timer(self, ts: float) -> None:
        backend = self.backend
        timers = backend.get(_TIMERS, ())
        if ts not in timers:
            backend.put(_TIMERS, tuple(sorted(timers + (ts,))))
            heapq.heappush(self._heap, (ts, next(self._seq), backend.current_key_group, backend.current_key))

    def delete_timer(self, ts: float) -> None:
        timers = self.backend.get(_TIMERS, ())
        if ts in timers:
            rest = tuple(t for t in timers if t != ts)
            if rest:
                self.backend.put(_TIMERS, rest)
            else:
                self.backend.delete(_TIMERS)

    def next_timer(self) -> float | None:
        return self._heap[0][0] if self._heap else None

    def on_processing_time(self, now: float) -> Batch | None:
        out: list[Any] = []
        heap, backend = self._heap, self.backend
        while heap and heap[0][0] <= now:
            ts, _, kg, key = heapq.heappop(heap)
            backend.set_current_key(key, kg)
            timers = backend.get(_TIMERS, ())
            if ts not in timers:
                continue  # deleted, or fired already
            self.delete_timer(ts)
            try:
                _extend(out, self.function.on_timer(ts, self.pctx))
            except Exception as exc:
                raise OperatorError(self.name, f"<timer {ts} of key {key!r}>", exc) from exc
        return out or None

    def restore(self, keyed: dict[int, dict[str, dict[Any, Any]]] | None, states: list[Any]) -> None:
        super().restore(keyed, states)
        for kg, key in list(self.backend.keys(_TIMERS)):
            self.backend.set_current_key(key, kg)
            for ts in self.backend.get(_TIMERS, ()):
                heapq.heappush(self._heap, (ts, next(self._seq), kg, key))

    # -- records ---------------------------------------------------------------------------------
    def process(self, batch: Batch) -> Batch | None:
        records, keys, groups = batch_keys(batch, self.key, self.ctx.max_parallelism, self.name)
        backend, fn, pctx = self.backend, self.function.process_element, self.pctx
        out: list[Any] = []
        record = None
        try:
            for record, key, kg in zip(records, keys, groups):
                backend.set_current_key(key, kg)
                _extend(out, fn(record, pctx))
        except Exception as exc:
            raise OperatorError(self.name, record, exc) from exc
        return out


@contextlib.contextmanager
def _guard(operator: str, what: str) -> Iterator[None]:
    """Turn a connector's exception into an OperatorError naming the operator and the step."""
    try:
        yield
    except OperatorError:
        raise
    except Exception as exc:
        raise OperatorError(operator, what, exc) from exc


def _batch_repr(batch: Batch) -> str:
    head = batch.slice(0, 3).to_pylist() if isinstance(batch, pa.RecordBatch) else batch[:3]
    return f"<batch of {batch_len(batch)} records: {head!r}...>"


def _extend(out: list[Any], produced: Iterable[Any] | None) -> None:
    if produced is not None:
        out.extend(produced)


_FACTORIES: dict[type, Callable[[Any], RuntimeOperator]] = {
    SourceSpec: SourceOperator,
    SinkSpec: SinkOperator,
    RecordFnSpec: RecordFnOperator,
    MapBatchesSpec: MapBatchesOperator,
    UnionSpec: UnionOperator,
    IterationHeadSpec: IterationHeadOperator,
    KeyedCountSpec: KeyedCountOperator,
    KeyedReduceSpec: KeyedReduceOperator,
    KeyedProcessSpec: KeyedProcessOperator,
}


def create_operator(spec: OperatorSpec) -> RuntimeOperator:
    """A fresh running operator for `spec`; user function objects are copied per subtask."""
    if isinstance(spec, KeyedProcessSpec):
        spec = KeyedProcessSpec(spec.name, spec.uid, spec.key, copy.deepcopy(spec.function))
    return _FACTORIES[type(spec)](spec)
