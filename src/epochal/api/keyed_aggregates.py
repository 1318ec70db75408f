"""Aggregates of a keyed stream: count, sum, min, max, mean, reduce and aggregate per key.

Each builds a `plan.aggregates.KeyedAggregateSpec` (reduce a `KeyedReduceSpec`). `emit` says when
results leave: `"per_record"`, one `(key, result)` per record; `"on_checkpoint"`, each key
changed during an epoch once, just before the epoch's checkpoint barrier (and at the end of the
input), so a sink commits one row per changed key per checkpoint. `combine` aggregates locally
before the key exchange too (`plan.local_global`: one partial per key and epoch crosses the
network instead of every record); by default it does wherever it cannot change what is
committed, i.e. with `emit="on_checkpoint"`.

On Arrow batches keyed by a column, with numeric value columns, the aggregates are vectorized
and emit a batch with the key column and one result column (`count`, `sum`, `min`, `max`,
`mean`, `result`); elsewhere they emit tuples `(key, result)`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Generic, TypeVar, cast, overload

from ..errors import GraphError
from ..plan.aggregates import AggregateCall, AggregateKind, KeyedAggregateSpec, ValueSelector, is_batch_function
from ..plan.specs import EMITS, Emit, KeyedReduceSpec, KeySelector
from ..validation import check_bool, check_callable, check_choice, check_has_methods

if TYPE_CHECKING:
    from .checks import OnErrorChoice
    from .functions import AggregateFunction, BatchAggregateFunction
    from .stream import DataStream

K = TypeVar("K")
T = TypeVar("T")
R = TypeVar("R")


def _combine(combine: object, emit: Emit) -> bool:
    """The local phase's default: on where it cannot change the committed output."""
    return emit == "on_checkpoint" if combine is None else check_bool("combine", combine)


def _value(value: object) -> ValueSelector:
    if value is None or callable(value) or (isinstance(value, (str, int)) and not isinstance(value, bool)):
        return value
    raise TypeError(f"value must be a field name, a tuple index or a function of the record, got {value!r}")


class KeyedAggregates(Generic[K, T]):
    """The aggregate methods of `KeyedStream` (a mixin: `KeyedStream` provides `_add`, `_key`, `_env`).
    Results are typed `(key, result)`: `count` an int, `reduce` the records' type, an aggregate
    function its result; a value read by field name is `Any`."""

    _key: KeySelector
    _env: Any

    if TYPE_CHECKING:
        def _add(self, spec_factory: Callable[[str], Any], base: str, name: str | None) -> DataStream[Any]: ...

    def _aggregate(self, call: AggregateCall, base: str, name: str | None, emit: Emit, combine: bool | None,
                   on_error: OnErrorChoice) -> DataStream[Any]:
        from .checks import on_error_policy

        emit = check_choice("emit", emit, EMITS)  # type: ignore[assignment]
        policy = on_error_policy(self._env, on_error, base)
        wants = _combine(combine, emit)
        if wants and not call.mergeable:
            raise GraphError(f"{base}(combine=True) needs partials that merge: give the aggregate function "
                             "a merge(a, b) method")
        key = self._key
        return self._add(lambda n: KeyedAggregateSpec(n, n, key, (call,), emit, policy, wants), base, name)

    def count(self, *, name: str | None = None, emit: Emit = "per_record", combine: bool | None = None
              ) -> DataStream[tuple[K, int]]:
        """Running count per key: `(key, count)`.

        On Arrow batches keyed by a column the update is vectorized and emits a batch with columns
        `<key>` and `count`, the same records as the per-record path.
        """
        return self._aggregate(AggregateCall(AggregateKind.COUNT), "count", name, emit, combine, "fail")

    def sum(self, value: ValueSelector = None, *, name: str | None = None, emit: Emit = "per_record",
            combine: bool | None = None, on_error: OnErrorChoice = "fail") -> DataStream[tuple[K, Any]]:
        """Running sum per key of `value` (a field name, a tuple index, or a function; None: the
        record): `(key, sum)`."""
        return self._aggregate(AggregateCall(AggregateKind.SUM, _value(value)), "sum", name, emit, combine, on_error)

    def min(self, value: ValueSelector = None, *, name: str | None = None, emit: Emit = "per_record",
            combine: bool | None = None, on_error: OnErrorChoice = "fail") -> DataStream[tuple[K, Any]]:
        """Running minimum per key of `value`: `(key, min)`."""
        return self._aggregate(AggregateCall(AggregateKind.MIN, _value(value)), "min", name, emit, combine, on_error)

    def max(self, value: ValueSelector = None, *, name: str | None = None, emit: Emit = "per_record",
            combine: bool | None = None, on_error: OnErrorChoice = "fail") -> DataStream[tuple[K, Any]]:
        """Running maximum per key of `value`: `(key, max)`."""
        return self._aggregate(AggregateCall(AggregateKind.MAX, _value(value)), "max", name, emit, combine, on_error)

    def mean(self, value: ValueSelector = None, *, name: str | None = None, emit: Emit = "per_record",
             combine: bool | None = None, on_error: OnErrorChoice = "fail") -> DataStream[tuple[K, float]]:
        """Running arithmetic mean per key of `value`: `(key, mean)` (kept as sum and count)."""
        return self._aggregate(AggregateCall(AggregateKind.MEAN, _value(value)), "mean", name, emit, combine,
                               on_error)

    def reduce(
        self, fn: Callable[[T, T], T], *, name: str | None = None, on_error: OnErrorChoice = "fail",
        emit: Emit = "per_record", combine: bool = False,
    ) -> DataStream[T]:
        """Rolling reduce per key: emits `fn(previous, record)` (the first record as is).

        `fn` should return a new value, not change `previous` in place: the emitted record and
        the key's state are one object. `on_error`: what happens to a record `fn` fails on (see
        `DataStream.map`); the key's value stays what it was before that record.
        `emit="on_checkpoint"`: each key that changed during an epoch emits its newest value
        once, just before the epoch's checkpoint barrier (and at the end of the input).
        `combine=True`: reduce locally before the key exchange too; only for an associative
        `fn` (`fn(a, fn(b, c)) == fn(fn(a, b), c)`), which Epochal cannot check, so it is off
        by default.
        """
        from .checks import on_error_policy

        check_callable("fn", fn)
        key = self._key
        policy = on_error_policy(self._env, on_error, "reduce")
        emit = check_choice("emit", emit, EMITS)  # type: ignore[assignment]
        wants = check_bool("combine", combine)
        if wants and callable(getattr(fn, "open", None)):
            raise GraphError("reduce(combine=True) takes a plain function: a ReduceFunction's open() and operator "
                             "state belong to one operator, and a local phase would run it in another")
        return self._add(lambda n: KeyedReduceSpec(n, n, key, fn, policy, emit, wants), "reduce", name)

    @overload
    def aggregate(self, aggregate: AggregateFunction[T, Any, R], *, name: str | None = None,
                  on_error: OnErrorChoice = "fail", emit: Emit = "per_record", combine: bool | None = None,
                  ) -> DataStream[tuple[K, R]]: ...
    @overload
    def aggregate(self, aggregate: BatchAggregateFunction, *, name: str | None = None,
                  on_error: OnErrorChoice = "fail", emit: Emit = "per_record", combine: bool | None = None,
                  ) -> DataStream[tuple[K, Any]]: ...

    def aggregate(
        self, aggregate: AggregateFunction[Any, Any, Any] | BatchAggregateFunction, *, name: str | None = None,
        on_error: OnErrorChoice = "fail", emit: Emit = "per_record", combine: bool | None = None,
    ) -> DataStream[Any]:
        """Aggregation per key with an `AggregateFunction` (per record) or a
        `BatchAggregateFunction` (vectorized on Arrow batches): `(key, result)` per record, or per
        changed key and epoch with `emit="on_checkpoint"`.

        An `AggregateFunction` without `merge` runs as a keyed process function (per record, no
        local phase: `combine` must stay off); with `merge`, or a `BatchAggregateFunction`, it
        aggregates locally before the key exchange by default with `emit="on_checkpoint"`.
        """
        from .checks import on_error_policy
        from .functions import _AggregateProcess

        if is_batch_function(aggregate) or callable(getattr(aggregate, "merge", None)):
            call = AggregateCall(AggregateKind.AGGREGATE, None, aggregate, "result")
            return self._aggregate(call, "aggregate", name, emit, combine, on_error)
        check_has_methods("aggregate", aggregate, "AggregateFunction", ("create_accumulator", "add", "get_result"))
        if emit != "per_record" or combine:
            raise GraphError("aggregate(emit='on_checkpoint') and aggregate(combine=True) need an aggregate "
                             "function with merge(a, b), or a BatchAggregateFunction")
        on_error_policy(self._env, on_error, "aggregate")
        process = getattr(self, "process")  # noqa: B009 - KeyedStream's
        per_record = _AggregateProcess(cast("AggregateFunction[Any, Any, Any]", aggregate))
        return process(  # type: ignore[no-any-return]
            per_record, name=self._env._builder.name(name, "aggregate"), on_error=on_error
        )
